"""The model call's retry policy as values (model/retry_policy.py; reference note §4): which failures
are retried, which are fatal, which are a poisoned replayed item to repair; and how long to wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx2
import openai
import pytest

from services.runtime.model.model_api import StreamError
from services.runtime.model.retry_policy import (
    Failure,
    Fatal,
    IdleStream,
    Repair,
    Retry,
    RetryPolicy,
    classify,
    failure_of,
    retry_wait,
    server_wait,
)


def status(code: int, err: dict[str, object] | None = None, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://x/v1/responses")
    body = {"error": err} if err is not None else None
    response = httpx2.Response(code, headers=headers or {}, request=request, json=body)
    return openai.APIStatusError(str((err or {}).get("message", "e")), response=response, body=body)


def outcome(code: int, err: dict[str, object] | None = None, headers: dict[str, str] | None = None) -> object:
    return classify(failure_of(status(code, err, headers)))


QUOTA = "You exceeded your current quota, please check your plan and billing details."
TOO_LARGE = ("Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 36278. "
             "The input or output tokens must be reduced in order to run successfully.")
RATE = ("Rate limit reached for gpt-5.1 in organization org-x on tokens per min (TPM): Limit 30000, Used 22999, "
        "Requested 1252. Please try again in 1.898s. Visit https://platform.openai.com/account/rate-limits.")


@pytest.mark.parametrize(("code", "err"), [
    (408, None), (409, None), (500, None), (502, None), (503, {"code": "server_error", "message": "x"}),
    (429, {"code": "rate_limit_exceeded", "message": RATE, "type": "tokens"}),
    (429, {"code": "slow_down", "message": "ramp up slowly"}),
])
def test_transient_statuses_are_retried(code: int, err: dict[str, object] | None) -> None:
    assert isinstance(outcome(code, err), Retry)


@pytest.mark.parametrize(("code", "err"), [
    (429, {"code": "insufficient_quota", "message": QUOTA, "type": "insufficient_quota"}),
    (429, {"code": "organization_spend_limit_exceeded", "message": "spend limit"}),
    (429, {"code": "rate_limit_exceeded", "message": TOO_LARGE, "type": "tokens"}),
    (400, {"code": "context_length_exceeded", "message": "Your input exceeds the context window of this model."}),
    (400, {"code": "invalid_prompt", "message": "Invalid prompt: flagged"}),
    (400, {"code": "unsupported_parameter", "message": "nope", "param": "reasoning.effort"}),
    (401, None), (403, None), (404, {"code": None, "message": "model `x` does not exist", "param": "model"}),
])
def test_quota_billing_too_large_and_other_4xx_are_fatal(code: int, err: dict[str, object] | None) -> None:
    assert isinstance(outcome(code, err), Fatal)


def test_x_should_retry_overrides_the_status() -> None:
    assert isinstance(outcome(400, {"code": "weird", "message": "m"}, {"x-should-retry": "true"}), Retry)
    assert isinstance(outcome(503, {"code": "server_error", "message": "m"}, {"x-should-retry": "false"}), Fatal)


def test_errors_inside_the_stream_by_code() -> None:
    assert isinstance(classify(failure_of(StreamError("too_many_requests: busy", retryable=False))), Retry)
    assert isinstance(classify(failure_of(StreamError("service_unavailable_error: x", retryable=False))), Retry)
    assert isinstance(classify(failure_of(StreamError(f"insufficient_quota: {QUOTA}", retryable=True))), Fatal)
    assert isinstance(classify(failure_of(StreamError("stream ended without response.completed",
                                                      retryable=True))), Retry)  # no code: its own word
    chat = openai.APIError("x", request=httpx2.Request("POST", "http://x"),
                           body={"code": "rate_limit_exceeded", "message": RATE})
    got = classify(failure_of(chat))
    assert isinstance(got, Retry) and got.server_wait_s == pytest.approx(1.898)


def test_transport_and_idle_streams_are_retried_as_provider_faults() -> None:
    cut = classify(failure_of(httpx2.RemoteProtocolError("peer closed")))
    idle = classify(failure_of(IdleStream("no data for 5 s")))
    assert isinstance(cut, Retry) and cut.provider_fault
    assert isinstance(idle, Retry) and idle.provider_fault
    rate = outcome(429, {"code": "rate_limit_exceeded", "message": RATE})
    assert isinstance(rate, Retry) and not rate.provider_fault  # a 429 is not the provider failing


def test_poisoned_replayed_items_are_repairs() -> None:
    enc = outcome(400, {"code": "invalid_encrypted_content", "message": "The encrypted content gAAA could not be verified."})
    assert isinstance(enc, Repair) and enc.kind == "reasoning"
    image = outcome(400, {"code": "invalid_image", "message": "bad image", "param": "input[3].content[1].image_url"})
    assert isinstance(image, Repair) and image.kind == "image" and image.item_index == 3
    named = outcome(400, {"code": "invalid_value", "message": "Could not process image", "param": "messages[2].content[1]"})
    assert not isinstance(named, Repair)  # the param names no image
    flagged = outcome(400, {"code": "content_filter", "message": "filtered", "param": "messages[4]"})
    assert isinstance(flagged, Repair) and flagged.kind == "item" and flagged.item_index == 4
    assert isinstance(outcome(400, {"code": "invalid_prompt", "message": "flagged"}), Fatal)  # names no item
    streamed = classify(failure_of(StreamError("invalid_encrypted_content: could not be verified", retryable=False)))
    assert isinstance(streamed, Repair) and streamed.kind == "reasoning"


def f429(headers: dict[str, str] | None = None, message: str = "slow down") -> Failure:
    return Failure(message=message, status=429, code="rate_limit_exceeded", headers=headers or {})


def test_server_wait_forms() -> None:
    assert server_wait(f429({"retry-after-ms": "250"})) == 0.25
    assert server_wait(f429({"retry-after-ms": "250", "retry-after": "9"})) == 0.25  # ms first
    assert server_wait(f429({"retry-after": "7"})) == 7.0
    assert server_wait(f429({"retry-after": "1.5"})) == 1.5
    now = datetime(2026, 1, 1, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert server_wait(f429({"retry-after": date}), now=lambda: now.timestamp()) == pytest.approx(30.0)
    assert server_wait(f429({"retry-after": "soon"})) is None
    assert server_wait(f429(message=RATE)) == pytest.approx(1.898)
    assert server_wait(f429(message="Rate limit reached. Please try again in 28ms.")) == pytest.approx(0.028)
    assert server_wait(f429(message="Requests to the deployment have exceeded the rate limit. Try again in 35 "
                                    "seconds.")) == 35.0
    other = Failure(message="Please try again in 5s", status=503, code="server_error")
    assert server_wait(other) is None  # the message is read only for rate_limit_exceeded (codex's rule)


def test_jitter_bounds() -> None:
    policy = RetryPolicy(max_retries=4, base_s=1.0, max_s=30.0, jitter=0.25)
    told = Retry("429", server_wait_s=2.0)
    assert retry_wait(told, 1, policy, rnd=lambda: 0.0) == 2.0  # never earlier than the server asked
    assert retry_wait(told, 1, policy, rnd=lambda: 0.999) == pytest.approx(2.0 * 1.25 + 0.25, rel=1e-2)
    waits = {round(retry_wait(told, 1, policy), 6) for _ in range(50)}
    assert len(waits) > 40  # sessions told the same Retry-After do not come back together
    backoff = Retry("503")
    for attempt, (low, high) in {1: (0.875, 1.125), 2: (1.75, 2.25), 3: (3.5, 4.5)}.items():
        assert low <= retry_wait(backoff, attempt, policy, rnd=lambda: 0.0) <= high
        assert low <= retry_wait(backoff, attempt, policy, rnd=lambda: 0.999) <= high
    assert retry_wait(backoff, 10, policy) <= 30.0  # capped
