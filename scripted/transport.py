"""The scripted model behind the real `openai.AsyncOpenAI` client, through an httpx transport: the offline
path runs the real client code (request serialization, streaming SSE parsing, tool-call deltas, errors).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from openai import AsyncOpenAI

from . import responses as scripted_responses
from .pacing import Timing, paced
from .prompt_cache import PromptCache
from .types import ScriptedError, ScriptedModel, ScriptedReply, ScriptedToolCall

BASE_URL = "http://scripted.local/v1"


class ScriptedTransport(httpx2.AsyncBaseTransport):
    """Serves POST /responses and /chat/completions (streaming or not) from one Python function that
    reads the Chat Completions shape. Keeps the last requests (for tests) and simulates OpenAI's
    prompt cache, so usage reports cached tokens as the real API does."""

    def __init__(self, model: ScriptedModel, timing: Timing | None = None) -> None:
        self._model = model
        self.timing = timing or Timing()
        # What tests read back (a handful of requests): a service's own transport holds the parsed bodies
        # (prompts of ~20 KB each) for no reader, so few of them (bench/soak.py measures its RSS flat).
        self.requests: deque[tuple[str, dict[str, Any]]] = deque(maxlen=64)
        self.cache = PromptCache()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        api = "responses" if path.endswith("/responses") else "chat" if path.endswith("/chat/completions") else None
        if api is None:
            return httpx2.Response(404, json={"error": {"message": "scripted model: unknown path", "code": "not_found"}})
        body = json.loads(await request.aread())
        self.requests.append((api, body))
        chat_body = scripted_responses.to_chat(body) if api == "responses" else body
        try:
            if api == "responses" and (foreign := scripted_responses.foreign_reasoning(body)) is not None:
                raise ScriptedError(400, "invalid_encrypted_content",
                                    f"The encrypted content for item {foreign} could not be verified.")
            reply = self._model(chat_body)
        except ScriptedError as err:
            headers = {"retry-after": f"{err.retry_after:g}"} if err.retry_after is not None else {}
            kind = "rate_limit_error" if err.status == 429 else "server_error" if err.status >= 500 else "invalid_request_error"
            return httpx2.Response(err.status, headers=headers,
                                  json={"error": {"message": err.message, "type": kind, "code": err.code}})
        prompt_text = _prompt_text(api, body)
        prompt = max(reply.prompt_tokens, len(prompt_text) // 4, 1)
        cached = min(self.cache.lookup_and_store(f"{body.get('model')}|{body.get('prompt_cache_key') or ''}",
                                                 prompt_text), prompt)
        wants_reasoning = bool((body.get("reasoning") or {}).get("effort") if api == "responses"
                               else body.get("reasoning_effort"))
        reasoning_tokens = 16 + len(reply.reasoning or "") // 4 if wants_reasoning else 0
        model_name = body.get("model", "scripted")
        if api == "responses":
            summary = (reply.reasoning or f"Planning step {len(body.get('input') or [])}.") if wants_reasoning else None
            use = scripted_responses.usage(prompt, cached, reply.completion_tokens, reasoning_tokens)
            events = scripted_responses.events(reply, body, use, summary, self.timing)
            if not body.get("stream"):
                return httpx2.Response(200, json=events[-1]["response"])
            marked = scripted_responses.sse(events)
        elif body.get("stream"):
            marked = _sse(reply, model_name, _usage(reply, prompt, cached, reasoning_tokens), self.timing)
        else:
            return httpx2.Response(200, json=_completion(reply, model_name, _usage(reply, prompt, cached,
                                                                                    reasoning_tokens)))
        chunks = [c for c, _ in marked]
        content: bytes | AsyncIterator[bytes] = (_cut(chunks) if reply.cut else paced(marked, self.timing)
                                                  if self.timing.active else b"".join(chunks))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=content)


def _prompt_text(api: str, body: dict[str, Any]) -> str:
    """The request as one canonical text, static part first (what a provider's prefix cache sees)."""
    if api == "responses":
        head = {"tools": body.get("tools") or [], "instructions": body.get("instructions") or ""}
        items = body.get("input") or []
    else:
        head = {"tools": body.get("tools") or []}
        items = body.get("messages") or []
    return "".join(json.dumps(x, sort_keys=True, separators=(",", ":")) for x in (head, *items))


async def _cut(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for c in chunks[: max(1, len(chunks) // 2)]:
        yield c
    raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")


def _finish(reply: ScriptedReply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: ScriptedReply, prompt: int, cached: int, reasoning: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": reply.completion_tokens + reasoning,
        "total_tokens": prompt + reply.completion_tokens + reasoning,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def _args(c: ScriptedToolCall) -> str:
    return json.dumps(c.arguments) if c.raw_arguments is None else c.raw_arguments


def _completion(reply: ScriptedReply, model: str, usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None, "refusal": reply.refusal or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _args(c)}}
            for c in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(reply)}],
        "usage": usage,
    }


def _sse(reply: ScriptedReply, model: str, usage: dict[str, Any], timing: Timing) -> list[tuple[bytes, bool]]:
    """The chunks, each marked when it carries a token (paced by `timing`)."""
    cid = "chatcmpl-" + uuid.uuid4().hex[:12]
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
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

    out = [(chunk({"role": "assistant", "content": ""}), False)]
    text, step = reply.content, timing.step(64)  # a few deltas, or one token each when paced
    for i in range(0, len(text), step):
        out.append((chunk({"content": text[i : i + step]}), True))
    if reply.refusal:
        out.append((chunk({"refusal": reply.refusal}), True))
    if reply.stream_error is not None:
        error = {"code": reply.stream_error.get("code"), "message": reply.stream_error.get("message", "")}
        return [out[0], (b"data: " + json.dumps({"error": {**error, "type": "server_error"}}).encode()
                         + b"\n\n", True)]
    step = timing.step(128)
    for index, call in enumerate(reply.tool_calls):
        args = _args(call)
        out.append((chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                           "function": {"name": call.name, "arguments": ""}}]}), False))
        for i in range(0, len(args), step):
            out.append((chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i : i + step]}}]}),
                        True))
    out.append((chunk({}, finish=_finish(reply)), False))
    out.append((chunk({}, usage=usage), False))
    out.append((b"data: [DONE]\n\n", False))
    return out


def scripted_client(model: ScriptedModel | ScriptedTransport, timing: Timing | None = None) -> AsyncOpenAI:
    """The real client, answered by `model` (or by a transport already built around one)."""
    transport = model if isinstance(model, ScriptedTransport) else ScriptedTransport(model, timing)
    http = httpx2.AsyncClient(transport=transport, base_url=BASE_URL)
    return AsyncOpenAI(api_key="scripted", base_url=BASE_URL, http_client=http, max_retries=0)


def scripted_transport(client: AsyncOpenAI) -> ScriptedTransport | None:
    """The scripted transport behind a client made by `scripted_client`, for tests and benches that read
    the requests it received."""
    transport = getattr(getattr(client, "_client", None), "_transport", None)
    return transport if isinstance(transport, ScriptedTransport) else None
