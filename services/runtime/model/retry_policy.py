"""What a failed model call means, as a value, and how long to wait before the next attempt
(docs/architecture.md "Model calls: retries and recovery"; the rules are the reference note's §4,
`/work/shared/reference/openai-api-rules.md`, "What is worth retrying").

`failure_of` reads an exception of the model boundary (a status error, an error inside a 200 stream,
a transport error, an idle stream) into a `Failure`; `classify` turns it into one of a closed set of
outcomes: `Retry` (with the wait the server asked for, if any), `Fatal`, or `Repair` (a 400 caused
by an item the harness replayed: strip or replace that item, then retry once). Pure: no clock, no I/O;
`retry_wait` takes its random source, so jitter is testable.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Literal

import httpx2
import openai

from services.runtime.model.model_api import StreamError

# Reference §4.1/§4.4: retried whatever the status says (also when they arrive inside a 200 stream).
RETRY_CODES = frozenset({"server_error", "rate_limit_exceeded", "server_is_overloaded", "slow_down",
                         "too_many_requests", "service_unavailable_error", "overloaded_error"})
# Reference §4.1: quota and billing (never better on retry), and codes that need a different request.
FATAL_CODES = frozenset({"insufficient_quota", "credit_balance_exhausted", "organization_spend_limit_exceeded",
                         "project_spend_limit_exceeded", "organization_usage_limit_exceeded", "billing_hard_limit_reached",
                         "context_length_exceeded", "invalid_prompt", "usage_not_included"})
RETRY_STATUS = frozenset({408, 409, 429})
# Reference §1.8/1.9: a replayed reasoning item whose encrypted content the API cannot read.
REASONING_CODES = frozenset({"invalid_encrypted_content"})
# An image part a model refuses (format, size, unreadable bytes, policy).
IMAGE_CODES = frozenset({"invalid_image", "invalid_image_format", "invalid_image_url", "image_parse_error",
                         "image_too_large", "invalid_base64_image", "image_content_policy_violation",
                         "unsupported_image_media_type"})
# A prompt filter (reference §4.1 `invalid_prompt`, §7.1 Azure's 400 `content_filter`): repairable only
# when `param` names the replayed item it flagged.
FILTER_CODES = frozenset({"content_filter", "invalid_prompt", "content_policy_violation"})
# Codex's `try_parse_retry_after` (reference §4.2), also Azure's "Try again in 35 seconds."
TRY_AGAIN = re.compile(r"(?i)try again in\s*(\d+(?:\.\d+)?)\s*(ms|s|seconds?)\b")
# The item a param points at: `input[3]`, `input[3].content[1].image_url`, `messages[2].content`.
ITEM_PARAM = re.compile(r"^(?:input|messages)\.?\[(\d+)\]")

RepairKind = Literal["reasoning", "image", "item"]


@dataclass(frozen=True)
class Failure:
    """One failed attempt as the API (or the transport) described it."""

    message: str
    status: int | None = None  # None: no HTTP status (transport, in-stream error, idle stream)
    code: str | None = None
    param: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    retryable_hint: bool | None = None  # what a StreamError without a code said about itself
    transport: bool = False  # the connection failed, was cut, or went idle (the provider's fault)

    @property
    def label(self) -> str:
        """The metric label and the short reason: the code, else the status, else the kind."""
        return self.code or (str(self.status) if self.status else ("transport" if self.transport else "stream"))


@dataclass(frozen=True)
class Retry:
    reason: str
    server_wait_s: float | None = None  # what the server asked for (headers or the message)
    provider_fault: bool = False  # 5xx or the connection: counts toward the circuit breaker


@dataclass(frozen=True)
class Fatal:
    reason: str


@dataclass(frozen=True)
class Repair:
    kind: RepairKind
    reason: str
    param: str | None = None  # the item the API named, when it did

    @property
    def item_index(self) -> int | None:
        match = ITEM_PARAM.match(self.param or "")
        return int(match.group(1)) if match else None


Outcome = Retry | Fatal | Repair


class IdleStream(Exception):
    """No bytes from the model for the idle timeout (model/call_guard.py): retried like a cut stream."""


class DeadlineExceeded(Exception):
    """The model call's overall deadline passed (all attempts and waits together)."""


def failure_of(exc: BaseException) -> Failure:
    if isinstance(exc, openai.APIStatusError):
        err = _error_object(exc.body)
        return Failure(message=str(err.get("message") or exc.message), status=exc.status_code, code=_code(err),
                       param=_str(err.get("param")), headers=dict(exc.response.headers))
    if isinstance(exc, StreamError):
        code = _str(getattr(exc, "code", None))
        text = str(exc)
        if code is None and (prefix := re.match(r"^([a-z_]+): ", text)) and prefix.group(1) != "None":
            code = prefix.group(1)  # responses_api's "code: message" form
        return Failure(message=text, code=code, param=_str(getattr(exc, "param", None)),
                       retryable_hint=exc.retryable)
    if isinstance(exc, DeadlineExceeded):
        return Failure(message=str(exc), code="deadline_exceeded")
    if isinstance(exc, IdleStream):
        return Failure(message=str(exc) or "the stream went idle", code="stream_idle", transport=True)
    if isinstance(exc, openai.APIConnectionError | httpx2.HTTPError):
        return Failure(message=f"{type(exc).__name__}: {exc}", transport=True)
    if isinstance(exc, openai.APIError):  # an error inside a Chat Completions stream (`data: {"error": ...}`)
        err = _error_object(exc.body)
        return Failure(message=str(err.get("message") or exc.message), code=_code(err), param=_str(err.get("param")))
    return Failure(message=f"{type(exc).__name__}: {exc}")


def classify(f: Failure) -> Outcome:
    """Reference §4.4, in order: a poisoned replayed item first (it is the harness's to fix), then the
    server's `x-should-retry` (§4.2: it overrides every status rule), then codes, then statuses."""
    reason = describe(f)
    repair = _repair(f, reason)
    if repair is not None:
        return repair
    should = f.headers.get("x-should-retry", "").strip().lower()
    if should in ("true", "false"):
        return Retry(reason, server_wait(f), _provider_fault(f)) if should == "true" else Fatal(reason)
    if f.code in FATAL_CODES or too_large(f):
        return Fatal(reason)
    if f.code in RETRY_CODES or f.transport or f.code == "stream_idle":
        return Retry(reason, server_wait(f), _provider_fault(f))
    if f.status is not None:
        if f.status in RETRY_STATUS or f.status >= 500:
            return Retry(reason, server_wait(f), _provider_fault(f))
        return Fatal(reason)
    return Retry(reason, None, False) if f.retryable_hint else Fatal(reason)


def _repair(f: Failure, reason: str) -> Repair | None:
    if f.status not in (None, 400) or f.code is None:
        return None
    if f.code in REASONING_CODES:
        return Repair("reasoning", reason, f.param)
    if f.code in IMAGE_CODES or (f.status == 400 and "image" in (f.param or "") and f.code != "context_length_exceeded"):
        return Repair("image", reason, f.param)
    if f.code in FILTER_CODES and f.param and ITEM_PARAM.match(f.param):
        return Repair("item", reason, f.param)
    return None


def _provider_fault(f: Failure) -> bool:
    return f.transport or (f.status is not None and f.status >= 500) or f.code in ("server_error", "stream_idle")


def too_large(f: Failure) -> bool:
    """Reference §4.1: "Request too large … Requested 36278" over a limit of 30000 is never a wait away."""
    if "request too large" in f.message.lower():
        return True
    limit = re.search(r"Limit (\d+)", f.message)
    requested = re.search(r"Requested (\d+)", f.message)
    return bool(limit and requested and int(requested.group(1)) > int(limit.group(1)))


def server_wait(f: Failure, now: Callable[[], float] = time.time) -> float | None:
    """The wait the server asked for (reference §4.2): `retry-after-ms`, then `retry-after` (seconds
    or an HTTP date), then "try again in …" in the message of a `rate_limit_exceeded`."""
    h = f.headers
    try:
        if "retry-after-ms" in h:
            return max(0.0, float(h["retry-after-ms"]) / 1000)
        if "retry-after" in h:
            raw = h["retry-after"]
            try:
                return max(0.0, float(raw))
            except ValueError:
                return max(0.0, parsedate_to_datetime(raw).timestamp() - now())
    except (ValueError, TypeError, IndexError, OverflowError):
        pass
    if f.code == "rate_limit_exceeded" and (match := TRY_AGAIN.search(f.message)):
        value, unit = float(match.group(1)), match.group(2).lower()
        return value / 1000 if unit == "ms" else value
    return None


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    base_s: float = 1.0
    max_s: float = 60.0  # the cap of a backoff wait; a server wait above it is not waited for
    jitter: float = 0.25  # a fraction of the wait, always added (also to a server's wait)


def retry_wait(outcome: Retry, attempt: int, policy: RetryPolicy, rnd: Callable[[], float] = random.random) -> float:
    """Seconds before attempt `attempt + 1`. A server's wait is never shortened, only lengthened by up
    to `jitter` of itself (sessions that got the same org-wide 429 do not come back in lockstep);
    otherwise exponential backoff, jittered both ways, capped at `max_s`."""
    if outcome.server_wait_s is not None:
        return outcome.server_wait_s * (1 + policy.jitter * rnd()) + policy.base_s * policy.jitter * rnd()
    wait = policy.base_s * 2 ** (attempt - 1)
    return min(wait * (1 - policy.jitter / 2 + policy.jitter * rnd()), policy.max_s)


def describe(f: Failure) -> str:
    head = f"{f.status} " if f.status else ""
    return f"{head}{f.code}: {f.message}" if f.code and not f.message.startswith(f"{f.code}:") \
        else f"{head}{f.message}"


def _error_object(body: object) -> dict[str, object]:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return err
    return {}


def _code(err: dict[str, object]) -> str | None:
    """The error's code; its `type` only when that is a code we know (a 429's type is `tokens`)."""
    kind = _str(err.get("type"))
    return _str(err.get("code")) or (kind if kind in RETRY_CODES | FATAL_CODES else None)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
