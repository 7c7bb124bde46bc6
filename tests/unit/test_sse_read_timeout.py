"""The model stream's read timeout over httpx-aiohttp (model/sse.py `ReadTimer`): one timer per
timeout instead of aiohttp's per TCP segment, with the same outcome as aiohttp's own: a body that
stops sending for the read timeout ends in httpx's ReadTimeout; one that keeps sending does not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx2
import openai
import pytest
from openai import DefaultAioHttpClient

from services.runtime.model.sse import ReadTimer, json_reads, open_stream

EVENT = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"x"}\n\n'


async def model_server(gaps: list[float]) -> tuple[asyncio.Server, int]:
    """A chunked text/event-stream answer: one event after each of `gaps` seconds, then `[DONE]`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for gap in [*gaps, 0.0]:
            await asyncio.sleep(gap)
            part = EVENT if gap else b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_all(port: int, read_s: float) -> AsyncIterator[int]:
    client = openai.AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1",
                                http_client=DefaultAioHttpClient(timeout=httpx2.Timeout(30, read=read_s)))
    resp = await open_stream(client, "/responses", {"model": "m", "stream": True})
    try:
        async for events in json_reads(resp):
            yield len(events)
    finally:
        await resp.aclose()
        await client.close()


@pytest.mark.timeout(20)
async def test_the_timer_takes_over_from_aiohttps_own() -> None:
    """The names ReadTimer reaches httpx-aiohttp's response by: renamed, aiohttp's timer would stay."""
    server, port = await model_server([0.01])
    client = openai.AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1",
                                http_client=DefaultAioHttpClient(timeout=httpx2.Timeout(30, read=7.0)))
    resp = await open_stream(client, "/responses", {"model": "m", "stream": True})
    try:
        timer = ReadTimer.take_over(resp)
        assert timer is not None and timer.timeout_s == 7.0
        assert resp.stream._stream._aiohttp_response.connection.protocol.read_timeout is None  # type: ignore[attr-defined]
        timer.stop()
    finally:
        await resp.aclose()
        await client.close()
        server.close()


@pytest.mark.timeout(20)
async def test_a_stream_that_stops_sending_times_out_as_aiohttp_would() -> None:
    server, port = await model_server([0.01, 5.0])
    got: list[int] = []
    started = time.monotonic()
    try:
        with pytest.raises(httpx2.ReadTimeout):
            async for n in read_all(port, 0.3):
                got.append(n)
    finally:
        server.close()
    assert got == [1]
    assert 0.25 < time.monotonic() - started < 3.0


@pytest.mark.timeout(20)
async def test_a_stream_that_keeps_sending_outlives_the_read_timeout() -> None:
    server, port = await model_server([0.1] * 8)  # 0.8 s in all, never 0.3 s without a byte
    try:
        got = [n async for n in read_all(port, 0.3)]
    finally:
        server.close()
    assert sum(got) == 8


@pytest.mark.timeout(20)
async def test_a_consumer_that_waits_between_reads_is_not_timed_out() -> None:
    """Time between reads (the read gate, an emit) is not the provider's silence."""
    server, port = await model_server([0.01] * 3)
    got: list[int] = []
    try:
        async for n in read_all(port, 0.3):
            got.append(n)
            await asyncio.sleep(0.5)
    finally:
        server.close()
    assert sum(got) == 3
