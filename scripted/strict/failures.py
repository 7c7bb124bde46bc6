"""Failure scripts: the `script:[...]` step fields that make the double misbehave the way a real provider
does (scripted/README.md "Scenarios"). A step is parsed here into a ScriptedReply or a ScriptedError;
gamma.py decides which step answers which call and counts `times`.
"""

from __future__ import annotations

import json
from typing import Any

from scripted.types import ScriptedError, ScriptedReply, ScriptedToolCall

USAGE_VARIANTS = ("full", "no_cache_write", "no_details", "null", "absent")
FINISH_REASONS = ("length", "content_filter")  # the others are derived (stop, tool_calls)

# 429 kinds by code (reference §4.1): a step may send its own message; these are the real defaults.
RATE_MESSAGES = {
    "rate_limit_exceeded": "Rate limit reached for {model} in organization org-scripted on tokens per min (TPM): "
                           "Limit 30000, Used 22999, Requested 12528. Please try again in 1.5s. Visit "
                           "https://platform.openai.com/account/rate-limits to learn more.",
    "insufficient_quota": "You exceeded your current quota, please check your plan and billing details. For more "
                          "information on this error, read the docs: "
                          "https://platform.openai.com/docs/guides/error-codes/api-errors.",
}


def error_of(step: dict[str, Any], model: str) -> ScriptedError:
    """An `error` step: status, code, message, `retry_after` (seconds, the Retry-After header),
    `headers` (any other: retry-after-ms, x-ratelimit-*, x-should-retry), `type`, `param`."""
    e = step["error"]
    code = str(e.get("code", "error"))
    message = e.get("message")
    if message is None:
        message = RATE_MESSAGES.get(code, "").format(model=model)
    headers = {str(k).lower(): str(v) for k, v in (e.get("headers") or {}).items()}
    return ScriptedError(int(e.get("status", 400)), code, str(message), retry_after=e.get("retry_after"),
                         headers=headers, type=e.get("type"), param=e.get("param"))


def _calls(step: dict[str, Any], truncate_last: bool) -> list[ScriptedToolCall]:
    calls = [ScriptedToolCall(name=c["name"], arguments=c.get("arguments", {}), raw_arguments=c.get("raw_arguments"))
             for c in step.get("tool_calls", [])]
    if truncate_last and calls:
        # Cut at the output limit, the last call's arguments stop mid-JSON (reference §3.2 [R]).
        last = calls[-1]
        full = json.dumps(last.arguments) if last.raw_arguments is None else last.raw_arguments
        last.raw_arguments = full[: max(1, len(full) // 2)]
    return calls


def reply_of(step: dict[str, Any], *, cut: bool, stream_error: bool) -> ScriptedReply:
    """A step's reply. `cut`/`stream_error`: whether this call still serves them (`times`)."""
    finish = step.get("finish_reason")
    if finish is not None and finish not in FINISH_REASONS:
        raise ValueError(f"script step: finish_reason must be one of {FINISH_REASONS}")
    usage = str(step.get("usage", "full"))
    if usage not in USAGE_VARIANTS:
        raise ValueError(f"script step: usage must be one of {USAGE_VARIANTS}")
    empty = bool(step.get("empty"))
    summary = step.get("summary", step.get("reasoning"))
    return ScriptedReply(
        content="" if empty else str(step.get("content", "")),
        tool_calls=[] if empty else _calls(step, truncate_last=finish == "length"),
        reasoning=summary, summary=summary, refusal="" if empty else str(step.get("refusal", "")),
        finish_reason=finish, cut=cut, stream_error=step["stream_error"] if stream_error else None,
        no_terminal=bool(step.get("no_terminal")), usage=usage,
        stall_s=float(step.get("stall_s", 0.0)), stall_after=int(step.get("stall_after", 0)))


def _images(messages: list[dict[str, Any]]) -> str | None:
    """The `param` of the first image a request carries (Chat parts, or the Responses items to_chat marked)."""
    for i, m in enumerate(messages):
        if m.get("image_params"):
            return str(m["image_params"][0])
        content = m.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "image_url":
                    return f"messages.[{i}].content.[{j}]"
    return None


def rejection(step: dict[str, Any], body: dict[str, Any]) -> ScriptedError | None:
    """`reject_replayed`: the 400 this call answers when the request replays what the step names (a
    reasoning item: invalid_encrypted_content as after a key rotation, reference §1.8/1.9; an image:
    the invalid_image 400 naming the item), else None."""
    kind = step.get("reject_replayed")
    messages = body.get("messages") or []
    if kind == "reasoning":
        for m in messages:
            for item in m.get("reasoning") or []:
                return ScriptedError(400, "invalid_encrypted_content",
                                     f"The encrypted content {str(item.get('encrypted_content') or '')[:12]}… could "
                                     "not be verified. Reason: Encrypted content could not be decrypted or parsed.")
    elif kind == "image" and (param := _images(messages)) is not None:
        return ScriptedError(400, "invalid_image", "The image data you provided does not represent a valid image. "
                             "Please check your input and try again.", param=param)
    elif kind not in (None, "reasoning", "image"):
        raise ValueError("script step: reject_replayed must be 'reasoning' or 'image'")
    return None
