"""What the double answers, in the real API's shapes: encrypted reasoning it can verify later, usage
variants, the error event shapes, request ids (reference §1, §3, §4.2, §5)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import uuid
from typing import Any

# The double's key: encrypted content is bound to the model (and item) that issued it (reference §1.8).
# A fixed key, so that every process of a stack (runtime workers, scripted/server.py) reads what another
# one issued, as one provider does.
KEY = b"gamma-scripted-double-key-v1"
PREFIX = "gAAAA"  # what the real blobs start with (reference §1.8)


def request_id() -> str:
    """Every response carries `x-request-id` (reference §4.2, `openai/_exceptions.py:93-104`)."""
    return "req_" + uuid.uuid4().hex


def _mac(payload: bytes) -> str:
    return hmac.new(KEY, payload, hashlib.sha256).hexdigest()[:32]


def encrypt(model: str, item_id: str, summary: str = "") -> str:
    """An opaque blob naming its issuer, with an HMAC over it: a foreign or edited blob is caught (§1.4, §1.8)."""
    payload = json.dumps({"model": model, "id": item_id, "summary": summary, "nonce": uuid.uuid4().hex[:8]},
                         separators=(",", ":")).encode()
    return PREFIX + base64.urlsafe_b64encode(payload).decode() + "." + _mac(payload)


def issuer(blob: str) -> dict[str, Any] | None:
    """The blob's payload ({model, id, ...}) when the double issued it unchanged, else None."""
    if not blob.startswith(PREFIX) or "." not in blob:
        return None
    body, _, mac = blob[len(PREFIX):].rpartition(".")
    try:
        payload = base64.urlsafe_b64decode(body.encode())
    except (binascii.Error, ValueError):
        return None
    if not hmac.compare_digest(mac, _mac(payload)):
        return None
    try:
        out = json.loads(payload)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def responses_usage(variant: str, prompt: int, cached: int, output: int, reasoning: int,
                    written: int = 0) -> dict[str, Any] | None:
    """Responses `usage` (reference §5): `full` is the SDK's shape (every field required);
    the others are what compatible servers send. None = `null`; `absent` is handled by the caller."""
    return _usage(variant, ("input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details"),
                  prompt, cached, output, reasoning, written)


def chat_usage(variant: str, prompt: int, cached: int, completion: int, reasoning: int,
               written: int = 0) -> dict[str, Any] | None:
    """Chat `usage` (reference §5: the details and their fields are optional in the SDK)."""
    return _usage(variant, ("prompt_tokens", "completion_tokens", "prompt_tokens_details",
                            "completion_tokens_details"), prompt, cached, completion, reasoning, written)


def _usage(variant: str, names: tuple[str, str, str, str], prompt: int, cached: int, output: int,
           reasoning: int, written: int = 0) -> dict[str, Any] | None:
    """One usage object under either API's field names (input, output, input details, output details).
    `written`: the prompt tokens written to the cache (breakpoint regime, scripted/breakpoint_cache.py),
    a part of the input disjoint from `cached` (reference §5)."""
    if variant == "null":
        return None
    given, made, given_details, made_details = names
    out: dict[str, Any] = {given: prompt, made: output + reasoning, "total_tokens": prompt + output + reasoning}
    if variant != "no_details":
        details: dict[str, Any] = {"cached_tokens": cached}
        if variant != "no_cache_write":
            details["cache_write_tokens"] = written
        out[given_details] = details
        out[made_details] = {"reasoning_tokens": reasoning}
    return out


def stream_error_event(error: dict[str, Any]) -> dict[str, Any]:
    """An in-stream `error` event: the live API nests the error object (the default); the SDK's type
    is flat (reference §3.1: openai-dotnet#881, stdapi.ai#294)."""
    code, message = error.get("code"), str(error.get("message", ""))
    if error.get("shape", "nested") == "flat":
        return {"type": "error", "code": code, "message": message, "param": None}
    return {"type": "error", "error": {"type": error.get("type", "server_error"), "code": code,
                                       "message": message, "param": None}}


def summary_events(item_id: str, output_index: int, text: str) -> list[tuple[str, dict[str, Any]]]:
    """A summary part streamed as the API does (reference §1.13): part.added before its text deltas."""
    where = {"item_id": item_id, "output_index": output_index, "summary_index": 0}
    part = {"type": "summary_text", "text": text}
    return [("response.reasoning_summary_part.added", {**where, "part": {"type": "summary_text", "text": ""}}),
            ("response.reasoning_summary_text.delta", {**where, "delta": text}),
            ("response.reasoning_summary_text.done", {**where, "text": text}),
            ("response.reasoning_summary_part.done", {**where, "part": part})]
