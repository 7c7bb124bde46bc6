"""The scripted model as its own HTTP server (scripted/server.py; scripted/README.md): the
runtime's stream readers get over real sockets, through both openai client backends, what they get
from the in-process transport; the worker's read gate reads them once per tick; bad requests get 4xx."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
import redis.asyncio as aioredis
from openai import AsyncOpenAI, DefaultAioHttpClient

from scripted.pacing import Timing
from scripted.server import MAX_HEAD, ScriptedServer
from scripted.transport import ScriptedTransport
from scripted.types import ScriptedReply, ScriptedToolCall
from services.runtime.engine.types import AgentEvent
from services.runtime.live.sender import EventSender
from services.runtime.model.chat_api import ChatApi
from services.runtime.model.responses_api import ResponsesApi
from shared.contracts.records.messages import AssistantMessage, TextContent
from shared.serving.model import reads_merged
from shared.settings import Settings

TOKENS = 30
PARAMS = {"type": "object", "properties": {"message": {"type": "string"}}}


def reply(body: dict[str, Any]) -> ScriptedReply:
    said = json.dumps(body)
    tokens = int(m.group(1)) if (m := re.search(r"tokens=(\d+)", said)) else TOKENS
    if "cut please" in said:
        return ScriptedReply(content="@ts@" * tokens, cut=True)
    return ScriptedReply(content="@ts@" * tokens, tool_calls=[ScriptedToolCall(name="message_user",
                                                                               arguments={"message": "done"})])


@contextlib.asynccontextmanager
async def server(timing: Timing) -> AsyncIterator[str]:
    srv = await asyncio.start_server(ScriptedServer(ScriptedTransport(reply, timing)).handle, "127.0.0.1", 0,
                                     limit=MAX_HEAD)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        srv.close()


def body(api: str, text: str = "hi") -> dict[str, Any]:
    if api == "responses":
        return {"model": "gpt-4.1-mini", "input": [{"role": "user", "content": text}], "stream": True, "store": False,
                "tools": [{"type": "function", "name": "message_user", "parameters": PARAMS, "strict": False}]}
    return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": text}], "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [{"type": "function", "function": {"name": "message_user", "parameters": PARAMS}}]}


def client(base_url: str, backend: str) -> AsyncOpenAI:
    http = DefaultAioHttpClient() if backend == "aiohttp" else httpx2.AsyncClient()
    return AsyncOpenAI(api_key="x", base_url=base_url, max_retries=0, http_client=http)


async def consume(c: AsyncOpenAI, api: str, gate: EventSender | None = None,
                  text: str = "hi") -> tuple[AssistantMessage, list[str]]:
    deltas: list[str] = []

    async def emit(event: AgentEvent) -> None:
        if event.type == "message_update":
            deltas.append(event.data["delta"])
    adapter = ResponsesApi() if api == "responses" else ChatApi()
    msg = await adapter.consume(c, body(api, text), AssistantMessage(model="gpt-5-mini", api=api), emit, asyncio.Event(), gate)
    return msg, deltas


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["aiohttp", "httpx"])
@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_streamed_answer_over_http_is_the_in_process_one(api: str, backend: str) -> None:
    timing = Timing(tokens_per_s=400, stamp=False)
    async with server(timing) as url:
        c = client(url, backend)
        try:
            remote, deltas = await consume(c, api)
        finally:
            await c.close()
    local = AsyncOpenAI(api_key="x", base_url="http://scripted.local/v1", max_retries=0,
                        http_client=httpx2.AsyncClient(transport=ScriptedTransport(reply, timing),
                                                      base_url="http://scripted.local/v1"))
    expected, _ = await consume(local, api)
    assert remote.text() == expected.text() == "@ts@" * TOKENS
    assert [(t.name, t.arguments) for t in remote.tool_calls()] == [(t.name, t.arguments) for t in expected.tool_calls()]
    assert "".join(deltas) == "@ts@" * TOKENS and len(deltas) > 1  # streamed, not one body
    assert remote.usage.input > 0 and remote.usage.input == expected.usage.input


@pytest.mark.timeout(60)
async def test_the_read_gate_reads_a_token_per_chunk_stream_once_per_tick() -> None:
    """80 tokens/s for 60 tokens (~0.75 s) behind a 50 ms read gate: every token arrives, in order, in
    about one read per tick instead of one per token, and a token waits at most about a tick."""
    timing = Timing(tokens_per_s=80, stamp=True)
    gate = EventSender(aioredis.Redis(), 0.05)  # only its gate: nothing is queued, no command sent
    async with server(timing) as url:
        c = client(url, "aiohttp")  # GAMMA_MODEL_HTTP=aiohttp: the setting that turns the worker's gate on
        assert reads_merged(Settings(GAMMA_MODEL_HTTP="aiohttp"))
        try:
            reads: list[tuple[float, str]] = []

            async def emit(event: AgentEvent) -> None:
                if event.type == "message_update":
                    reads.append((time.time(), event.data["delta"]))
            msg = await ResponsesApi().consume(c, body("responses", "tokens=60"),
                                               AssistantMessage(model="gpt-5-mini", api="responses"), emit, asyncio.Event(), gate)
        finally:
            await c.close()
    stamps = [(at, float(s)) for at, d in reads for s in re.findall(r"(\d{10}\.\d{6})s\d{10}\.\d{6}", d)]  # <due>s<sent>
    assert len(stamps) == 60 and [s for _, s in stamps] == sorted(s for _, s in stamps)
    assert msg.tool_calls() and isinstance(msg.content[0], TextContent)
    assert len(reads) <= 60 / 3  # ~4 tokens a tick at 80 tokens/s and 50 ms; per token it was 60 reads
    assert max(at - due for at, due in stamps) < 0.05 + 0.1  # a tick, plus a loaded machine's slack


def test_reads_merged_is_the_http_backend_setting() -> None:
    """The read gate follows GAMMA_MODEL_HTTP, never the client's private attributes."""
    assert reads_merged(Settings(GAMMA_MODEL_HTTP="aiohttp")) and not reads_merged(Settings(GAMMA_MODEL_HTTP="httpx"))


@pytest.mark.timeout(30)
async def test_bad_requests_get_4xx_and_a_cut_stream_is_a_connection_error() -> None:
    async with server(Timing(tokens_per_s=400)) as url:
        async with httpx.AsyncClient() as h:
            assert (await h.post(url.replace("/v1", "/other"), json={})).status_code == 404
            assert (await h.get(url + "/responses")).status_code == 404
            big = await h.post(url + "/responses", content=b"{}", headers={"x-pad": "a" * (MAX_HEAD + 10)})
            assert big.status_code == 431
        c = client(url, "aiohttp")
        try:
            with pytest.raises((openai.APIConnectionError, httpx2.HTTPError)):
                await consume(c, "responses", text="cut please")
            msg, _ = await consume(c, "responses")  # the pool still serves the next call
            assert msg.tool_calls()
        finally:
            await c.close()


class CountingGate:
    def __init__(self) -> None:
        self.waits = 0

    async def wait(self) -> None:
        self.waits += 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_the_gate_is_waited_only_after_streamed_text(api: str) -> None:
    """A read that ends a response (the items, the usage) is not held for a tick: only a read that
    ended in streamed text waits (more comes at the model's pace). Instant: one read, no wait; paced:
    a wait per text read, none after the last."""
    for timing, most in ((Timing(), 0), (Timing(tokens_per_s=400), TOKENS)):
        gate = CountingGate()
        local = AsyncOpenAI(api_key="x", base_url="http://scripted.local/v1", max_retries=0,
                            http_client=httpx2.AsyncClient(transport=ScriptedTransport(reply, timing),
                                                          base_url="http://scripted.local/v1"))
        msg, deltas = await consume(local, api, gate)  # type: ignore[arg-type]
        assert msg.tool_calls() and "".join(deltas) == "@ts@" * TOKENS
        assert gate.waits <= most and (gate.waits == 0) == (most == 0)
        assert gate.waits <= len(deltas)  # at most one per read that brought text
