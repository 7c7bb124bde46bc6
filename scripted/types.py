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
    # {"code", "message", "event"?: "failed"}: an `error` event (or `response.failed`) right after the start
    stream_error: dict[str, str] | None = None


@dataclass
class ScriptedError(Exception):
    """Returned as an HTTP error in OpenAI's error shape (e.g. 400 context_length_exceeded)."""

    status: int
    code: str
    message: str
    retry_after: float | None = None  # sent as the Retry-After header


ScriptedModel = Callable[[dict[str, Any]], ScriptedReply]
