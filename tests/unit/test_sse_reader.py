"""The runtime's own SSE reader (model/sse.py, docs/architecture.md "Streaming at scale"): the events the SDK's decoder would give,
however the bytes are cut, and the SDK's error rules."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest

from services.runtime.model.sse import json_events, json_reads, open_stream, split_events


def response(parts: list[bytes]) -> httpx2.Response:
    async def body() -> AsyncIterator[bytes]:
        for p in parts:
            yield p
    return httpx2.Response(200, content=body(), request=httpx2.Request("POST", "http://model.test/v1/responses"))


async def collect(parts: list[bytes]) -> list[dict[str, Any]]:
    return [e async for e in json_events(response(parts))]


EVENTS = [{"type": "response.output_text.delta", "delta": f"tok{i} ", "n": i} for i in range(5)]
WIRE = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in EVENTS) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(WIRE)])
async def test_events_survive_any_cut(size: int) -> None:
    parts = [WIRE[i : i + size] for i in range(0, len(WIRE), size)]
    assert await collect(parts) == EVENTS


async def test_an_encoded_body_goes_through_httpx_decoders() -> None:
    """Read straight from the transport only without a content encoding (model/sse.py `_body`)."""
    packed = gzip.compress(WIRE)

    async def body() -> AsyncIterator[bytes]:
        yield packed[:10]
        yield packed[10:]
    resp = httpx2.Response(200, content=body(), headers={"content-encoding": "gzip"},
                          request=httpx2.Request("POST", "http://model.test/v1/responses"))
    assert [e async for e in json_events(resp)] == EVENTS


async def test_a_body_read_straight_counts_as_consumed() -> None:
    resp = response([WIRE])
    assert [e async for e in json_events(resp)] == EVENTS
    with pytest.raises(httpx2.StreamConsumed):
        async for _ in resp.aiter_bytes():
            pass


async def test_crlf_multiline_data_comments_and_done() -> None:
    wire = (b": keep-alive\r\n\r\nevent: x\r\ndata: {\"a\":\r\ndata:  1}\r\n\r\n"
            b"data: {\"b\": 2}\r\n\r\ndata: [DONE]\r\n\r\ndata: {\"after\": 1}\r\n\r\n")
    # cut between CR and LF, where a naive CRLF rewrite would see a lone CR
    cut = wire.index(b"\r\n\r\ndata: {\"b\"") + 1
    assert await collect([wire[:cut], wire[cut:]]) == [{"a": 1}, {"b": 2}]


async def test_error_object_raises_api_error_with_its_code() -> None:
    wire = b'data: {"choices": []}\n\ndata: {"error": {"message": "overloaded", "code": "server_error"}}\n\n'
    seen: list[dict[str, Any]] = []
    with pytest.raises(openai.APIError) as info:
        async for e in json_events(response([wire])):
            seen.append(e)
    assert seen == [{"choices": []}]
    assert str(info.value) == "overloaded" and info.value.code == "server_error"


async def test_data_that_is_not_json_is_skipped_and_done_is_told() -> None:
    """As Codex reads a stream (reference §3.1): unparseable data is skipped; whether the reply is whole
    is the consumer's check of its terminal event, so `[DONE]` is reported to it."""
    ended: list[bool] = []
    wire = b'data: {not json\n\ndata: {"a": 1}\n\ndata: [DONE]\n\n'
    assert [e async for es in json_reads(response([wire]), lambda: ended.append(True)) for e in es] == [{"a": 1}]
    assert ended == [True]
    assert await collect([b'data: {"a": 1}\n\n']) == [{"a": 1}]  # no [DONE]: nothing told, nothing raised


def test_split_keeps_the_unfinished_rest() -> None:
    blocks, rest = split_events(b"data: 1\n\ndata: 2\n\ndata: 3\n")
    assert blocks == [b"data: 1", b"data: 2"] and rest == b"data: 3\n"


async def test_json_reads_groups_the_events_of_one_read() -> None:
    cut = WIRE.index(b"event: response.output_text.delta", 10) + 3  # mid-way through the second event
    reads = [r async for r in json_reads(response([WIRE[:cut], WIRE[cut:]]))]
    assert reads == [EVENTS[:1], EVENTS[1:]]  # the second event completes in the second read


async def test_json_reads_yields_what_came_before_an_error_then_raises() -> None:
    wire = b'data: {"a": 1}\n\ndata: {"error": {"message": "boom", "code": "server_error"}}\n\n'
    seen: list[list[dict[str, Any]]] = []
    with pytest.raises(openai.APIError, match="boom"):
        async for r in json_reads(response([wire])):
            seen.append(r)
    assert seen == [[{"a": 1}]]


@pytest.mark.parametrize("body", [{"model": "m", "input": [{"role": "user", "content": "héllo ✓"}], "stream": True},
                                  {"model": "m", "input": [], "metadata": {"big": 2**70}}],
                         ids=["orjson", "beyond-orjson"])
async def test_open_stream_posts_the_body_as_compact_json_with_the_client_headers(body: dict[str, Any]) -> None:
    """The body is encoded here (orjson), not by the SDK; what orjson refuses goes through the SDK's
    encoder. Either way the server gets the same JSON, as application/json, with the client's auth."""
    seen: list[httpx2.Request] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, content=b"data: [DONE]\n\n", headers={"content-type": "text/event-stream"})
    client = openai.AsyncOpenAI(api_key="k", base_url="http://model.test/v1",
                                http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)))
    resp = await open_stream(client, "/responses", body)
    await resp.aclose()
    (request,) = seen
    assert json.loads(request.content) == body
    assert request.content == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    assert request.headers["content-type"] == "application/json"
    assert request.headers["authorization"] == "Bearer k"
