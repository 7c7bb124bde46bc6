"""The scripted model behind the real `openai.AsyncOpenAI` client, through an httpx transport: the offline
path runs the real client code (request serialization, streaming SSE parsing, tool-call deltas, errors).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from openai import AsyncOpenAI

from scripted import chat
from scripted import responses as scripted_responses
from scripted.breakpoint_cache import BreakpointCache
from scripted.pacing import Timing, paced
from scripted.prompt_cache import PromptCache
from scripted.settings import ScriptedSettings
from scripted.strict import Strictness, replies, rules
from scripted.strict import requests as strict_requests
from scripted.types import ScriptedError, ScriptedModel, ScriptedReply

BASE_URL = "http://scripted.local/v1"


class ScriptedTransport(httpx2.AsyncBaseTransport):
    """Serves POST /responses and /chat/completions (streaming or not) from one Python function that
    reads the Chat Completions shape. Every request first meets the strict model-API double (scripted/strict/:
    a request the real API refuses is refused here, in its shape). Keeps the last requests (for tests) and
    simulates OpenAI's prompt cache, so usage reports cached tokens as the real API does."""

    def __init__(self, model: ScriptedModel, timing: Timing | None = None, strict: Strictness | None = None) -> None:
        self._model = model
        self.timing = timing or Timing()
        self.strict = strict if strict is not None else ScriptedSettings().strictness()
        # What tests read back (a handful of requests): a service's own transport holds the parsed bodies
        # (prompts of ~20 KB each) for no reader, so few of them (bench/soak.py measures its RSS flat).
        self.requests: deque[tuple[str, dict[str, Any]]] = deque(maxlen=64)
        self.cache = PromptCache()
        self.breakpoints = BreakpointCache()  # the GPT-5.6+ regime (docs/cache.md)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        rid = replies.request_id()
        path = request.url.path
        api = "responses" if path.endswith("/responses") else "chat" if path.endswith("/chat/completions") else None
        if api is None:
            return _error(ScriptedError(404, "not_found", f"Invalid URL (POST {path})"), rid)
        body = json.loads(await request.aread())
        self.requests.append((api, body))
        try:
            refused = strict_requests.check(api, body, self.strict)  # once per request, never per chunk
            if refused is not None:
                raise refused
            reply = self._model(scripted_responses.to_chat(body) if api == "responses" else body)
        except ScriptedError as err:
            return _error(err, rid)
        if reply.stall_s > 0 and reply.stall_after <= 0:
            await asyncio.sleep(reply.stall_s)  # an idle provider: nothing at all, not even the headers
        marked = self._render(api, body, reply)
        if isinstance(marked, dict):
            return httpx2.Response(200, headers={"x-request-id": rid}, json=marked)
        chunks = [c for c, _ in marked]
        content: bytes | AsyncIterator[bytes]
        if reply.cut:
            content = _cut(chunks)
        elif reply.stall_s > 0:
            content = _stalled(chunks, reply.stall_after, reply.stall_s)
        else:
            content = paced(marked, self.timing) if self.timing.active else b"".join(chunks)
        return httpx2.Response(200, headers={"content-type": "text/event-stream", "x-request-id": rid},
                               content=content)

    def _render(self, api: str, body: dict[str, Any], reply: ScriptedReply) -> dict[str, Any] | list[tuple[bytes, bool]]:
        """The reply as the API sends it: a JSON body (not streamed) or the marked SSE chunks."""
        prompt_text = _prompt_text(api, body)
        prompt = max(reply.prompt_tokens, len(prompt_text) // 4, 1)
        cached, written = self._cached(api, body, prompt_text)
        cached, written = min(cached, prompt), min(written, max(0, prompt - cached))
        reasons = self._reasons(api, body)
        reasoning_tokens = 16 + len(reply.summary or "") // 4 if reasons else 0
        model_name = str(body.get("model", "scripted"))
        if api == "chat":
            use = chat.usage(reply, prompt, cached, reasoning_tokens, written)
            if not body.get("stream"):
                return chat.completion(reply, model_name, use)
            return chat.sse(reply, model_name, use, self.timing)
        summary = (reply.summary or f"Planning step {len(body.get('input') or [])}.") if reasons else None
        use = scripted_responses.usage(prompt, cached, reply.completion_tokens, reasoning_tokens, reply.usage, written)
        # reference §1.12: summaries only when `reasoning.summary` asks (the lenient double: always)
        summarize = bool((body.get("reasoning") or {}).get("summary")) or not self.strict.on("reasoning")
        encrypted = ("reasoning.encrypted_content" in (body.get("include") or [])
                     or self.strict.encrypted_by_default)  # reference §1.3
        events = scripted_responses.events(reply, body, use, summary, self.timing, summarize, encrypted)
        if not body.get("stream"):
            return dict(events[-1].get("response") or {})
        return scripted_responses.sse(events)

    def _cached(self, api: str, body: dict[str, Any], prompt_text: str) -> tuple[int, int]:
        """(cached, written) tokens by the model's cache regime: breakpoints from GPT-5.6 on, prefixes
        in 128-token steps before (docs/cache.md; reference §6). Writes are billed only from 5.6 on."""
        key = f"{body.get('model')}|{body.get('prompt_cache_key') or ''}"
        fam = rules.family(str(body.get("model", "")))
        if fam is not None and fam.cache_fields:
            use = self.breakpoints.lookup_and_store(key, api, body)
            return use.cached, use.written
        return self.cache.lookup_and_store(key, prompt_text), 0

    def _reasons(self, api: str, body: dict[str, Any]) -> bool:
        """The model reasons (a reasoning item, reasoning tokens): at its effective effort (reference §1.2:
        the family's default when none is sent); the lenient double only when an effort is sent."""
        if self.strict.on("reasoning"):
            effort = rules.effort(api, body, rules.family(str(body.get("model", ""))))
        else:
            effort = ((body.get("reasoning") or {}).get("effort") if api == "responses"
                      else body.get("reasoning_effort"))
        return bool(effort) and effort != "none"


def _error(err: ScriptedError, rid: str) -> httpx2.Response:
    """An error in the real API's shape: `{"error": {message, type, param, code}}`, `x-request-id`, and
    the step's headers (reference §4.1/4.2)."""
    headers = {"x-request-id": rid, **err.headers}
    if err.retry_after is not None:
        headers["retry-after"] = f"{err.retry_after:g}"
    return httpx2.Response(err.status, headers=headers, json=err.body())


async def _stalled(chunks: list[bytes], after: int, stall_s: float) -> AsyncIterator[bytes]:
    """The first `after` chunks, then nothing for `stall_s` (an idle stream), then the rest."""
    yield b"".join(chunks[:after])
    await asyncio.sleep(stall_s)
    if chunks[after:]:
        yield b"".join(chunks[after:])


def _prompt_text(api: str, body: dict[str, Any]) -> str:
    """The request as one canonical text, static part first (what a provider's prefix cache sees)."""
    # The tools render first, then the instructions (reference §6: "tools render before it").
    heads: list[dict[str, Any]] = [{"tools": body.get("tools") or []}]
    if api == "responses":
        heads.append({"instructions": body.get("instructions") or ""})
    items = (body.get("input") if api == "responses" else body.get("messages")) or []
    return "".join(json.dumps(x, sort_keys=True, separators=(",", ":")) for x in (*heads, *items))


async def _cut(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for c in chunks[: max(1, len(chunks) // 2)]:
        yield c
    raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")


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
