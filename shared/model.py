"""Model access: always the real `openai.AsyncOpenAI` client.

With OPENAI_API_KEY set it talks to OPENAI_BASE_URL (any OpenAI-compatible server). Without it, a
scripted model answers behind the same client through an httpx transport, so the offline path runs
the real client code: request serialization, streaming SSE parsing, tool-call deltas, errors.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from openai import AsyncOpenAI

from .settings import Settings


@dataclass
class ScriptedToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:12])


@dataclass
class ScriptedReply:
    content: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    finish_reason: str | None = None  # derived from tool_calls when None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class ScriptedError(Exception):
    """Returned as an HTTP error in OpenAI's error shape (e.g. 400 context_length_exceeded)."""

    status: int
    code: str
    message: str


ScriptedModel = Callable[[dict[str, Any]], ScriptedReply]


class ScriptedTransport(httpx.AsyncBaseTransport):
    """Serves POST /chat/completions (streaming or not) from a Python function."""

    def __init__(self, model: ScriptedModel) -> None:
        self._model = model

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"error": {"message": "scripted model: unknown path", "code": "not_found"}})
        body = json.loads(await request.aread())
        try:
            reply = self._model(body)
        except ScriptedError as err:
            return httpx.Response(
                err.status, json={"error": {"message": err.message, "type": "invalid_request_error", "code": err.code}}
            )
        model_name = body.get("model", "scripted")
        if body.get("stream"):
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=_sse(reply, model_name)
            )
        return httpx.Response(200, json=_completion(reply, model_name))


def _finish(reply: ScriptedReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: ScriptedReply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def _completion(reply: ScriptedReply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
        "usage": _usage(reply),
    }


def _sse(reply: ScriptedReply, model: str) -> bytes:
    cid = "chatcmpl-" + uuid.uuid4().hex[:12]
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
        payload: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else [],
        }
        if usage is not None:
            payload["usage"] = usage
        return b"data: " + json.dumps(payload).encode() + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    text = reply.content
    for i in range(0, len(text), 64):  # a few deltas, like a real stream
        out.append(chunk({"content": text[i : i + 64]}))
    for index, call in enumerate(reply.tool_calls):
        args = json.dumps(call.arguments)
        out.append(
            chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                   "function": {"name": call.name, "arguments": ""}}]})
        )
        for i in range(0, len(args), 128):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i : i + 128]}}]}))
    out.append(chunk({}, finish=_finish(reply)))
    out.append(chunk({}, usage=_usage(reply)))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def openai_client(settings: Settings, scripted: ScriptedModel | None = None) -> AsyncOpenAI:
    """The real client; `scripted` is used only when no OPENAI_API_KEY is configured."""
    if settings.openai_api_key:
        return AsyncOpenAI(api_key=settings.openai_api_key, base_url=settings.openai_base_url, max_retries=2)
    if scripted is None:
        raise RuntimeError("no OPENAI_API_KEY and no scripted model given")
    http = httpx.AsyncClient(transport=ScriptedTransport(scripted), base_url="http://scripted.local/v1")
    return AsyncOpenAI(api_key="scripted", base_url="http://scripted.local/v1", http_client=http, max_retries=0)
