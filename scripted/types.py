"""The scripted model's reply types: what a script step says the model answers (transport.py serves
them over both APIs; responses.py renders them as Responses events)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ScriptedToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:12])
    raw_arguments: str | None = None  # sent instead of the JSON of `arguments` (e.g. invalid JSON)


@dataclass
class ScriptedReply:
    content: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    finish_reason: str | None = None  # derived from tool_calls when None; "length" = out of output tokens
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning: str | None = None  # the reasoning summary, sent when the request asks for reasoning
    refusal: str = ""
    cut: bool = False  # the connection drops in the middle of the stream
    # {"code", "message", "event"?: "failed", "shape"?: "nested" | "flat"}: an `error` event (or
    # `response.failed`) right after the start; nested is the live API's wire shape (reference §3.1)
    stream_error: dict[str, str] | None = None
    no_terminal: bool = False  # the body ends cleanly without its terminal event (reference §3.1/3.2)
    summary: str | None = None  # reasoning summary text, streamed only when `reasoning.summary` is set (§1.12)
    usage: str = "full"  # full | no_cache_write | no_details | null | absent: what compatible servers send (§5)
    stall_s: float = 0.0  # the server goes quiet this long (an idle stream) ...
    stall_after: int = 0  # ... after this many chunks (0: before the response headers)


@dataclass
class ScriptedError(Exception):
    """Returned as an HTTP error in OpenAI's error shape (e.g. 400 context_length_exceeded)."""

    status: int
    code: str | None
    message: str
    retry_after: float | None = None  # sent as the Retry-After header
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers (retry-after-ms, x-ratelimit-*)
    type: str | None = None  # the error object's `type` (default derived from the status, reference §4.1)
    param: str | None = None

    @property
    def kind(self) -> str:
        if self.type:
            return self.type
        return ("rate_limit_error" if self.status == 429 else "server_error" if self.status >= 500
                else "invalid_request_error")

    def body(self) -> dict[str, Any]:
        """The real API's error body: `{"error": {message, type, param, code}}` (reference §4.1/4.2)."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


ScriptedModel = Callable[[dict[str, Any]], ScriptedReply]
