"""Server-sent events read straight off the model API's HTTP response (docs/architecture.md "Streaming at scale").

The `openai` client still sends the request (auth, base URL, headers, status errors become
`APIStatusError`s as usual), but its stream iterator is not used: it runs every event through the
SDK's model construction (~100 µs an event, 43% of the runtime's CPU at 500 streaming sessions in
bench-stream). Here an event is `orjson.loads` and a dict; the adapters (responses_api, chat_api)
validate only what they keep, once per call, against the openai package's types.

Same rules as the SDK's `AsyncStream`: `data: [DONE]` ends the stream, and a JSON object with a
truthy `error` key raises `openai.APIError` (an error inside a 200 stream, retryable by code).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any, Protocol

import aiohttp
import httpx2
import openai
import orjson
from openai import AsyncOpenAI


async def open_stream(client: AsyncOpenAI, path: str, body: dict[str, Any]) -> httpx2.Response:
    """POST through the openai client (its auth, headers, retries-off and status errors), the body
    sent as is (it is the wire format already), and the response returned unread.

    The body goes as JSON bytes made by orjson: the SDK's encoder (stdlib json with a custom class)
    took ~5% of the runtime's loop while 200 sessions started their turns (bench-stream), each body
    carrying the whole system prompt and conversation. Same bytes on the wire (compact, UTF-8)."""
    try:
        content = orjson.dumps(body)
    except TypeError:  # what orjson refuses (an int beyond 64 bits): the SDK's own encoder
        response = await client.post(path, body=body, cast_to=httpx2.Response, stream=True)
    else:
        response = await client.post(path, content=content, cast_to=httpx2.Response, stream=True)
    assert isinstance(response, httpx2.Response)
    activity = ACTIVITY.get()
    if activity is not None:  # the headers are in: the call is not idle, and its rate-limit headers are known
        activity.last = asyncio.get_running_loop().time()
        activity.headers = response.headers
    return response


def split_events(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete events (the bytes between blank lines) and the unfinished rest."""
    if b"\r" in buf:
        # CRLF or CR line ends (allowed by the SSE spec): a trailing CR may be half of a CRLF.
        keep = buf.endswith(b"\r")
        head = buf[:-1] if keep else buf
        buf = head.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (b"\r" if keep else b"")
    # One C-level split, not a loop of `find`s (~3% of the runtime's loop streaming, bench-stream):
    # the last part is what is still unfinished; empty parts (blank lines in a row) are no events.
    *blocks, rest = buf.split(b"\n\n")
    return [b for b in blocks if b], rest


def data_of(block: bytes) -> bytes | None:
    """The event's data (multi-line data joined with newlines); None for a comment-only block."""
    if block.startswith(b"data: ") and b"\n" not in block:
        return block[6:]  # the common case: one data line, no event name (chat) - no split
    nl = block.find(b"\n")
    if block.startswith(b"event:") and block.startswith(b"data: ", nl + 1) and block.find(b"\n", nl + 1) < 0:
        return block[nl + 7 :]  # the Responses API's case: an event name, then one data line
    lines = [line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


class ReadGate(Protocol):
    """When the next read of a model stream may happen (the worker's EventSender: just before its tick).
    A consumer waits for it only after a read that ended in streamed text (more is coming at the
    model's pace); the events that end a response are read at once."""

    async def wait(self) -> None: ...


async def json_reads(response: httpx2.Response,
                     done: Callable[[], None] | None = None) -> AsyncIterator[list[dict[str, Any]]]:
    """The events of each read (non-empty lists of JSON objects), until `[DONE]` (`done` is called
    then) or the end of the body: a consumer handles what one read brought at once (one emit for all
    its text deltas). A consumer that awaits a ReadGate before asking for the next read gets what
    arrived meanwhile in one. Data that is not JSON is skipped, as Codex does (reference §3.1): the
    consumer's own check of the stream's terminal event says whether the reply is whole."""
    buf = b""
    activity = ACTIVITY.get()
    loop = asyncio.get_running_loop()
    async for chunk in _reads(response):
        if activity is not None:
            activity.last = loop.time()  # one store per read: the idle watch re-arms only when it fires
        blocks, buf = split_events(buf + chunk if buf else chunk)
        events: list[dict[str, Any]] = []
        for block in blocks:
            data = data_of(block)
            if data is None:
                continue
            if data.startswith(b"[DONE]"):
                if done is not None:
                    done()
                if events:
                    yield events
                return
            try:
                event = orjson.loads(data)  # ~3x json.loads on these small objects (bench/stream_micro.py)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("error"):
                if events:
                    yield events  # what came before the error goes out first
                raise _stream_error(response, event["error"])
            if isinstance(event, dict):
                events.append(event)
        if events:
            yield events


class Activity:
    """When the model stream under way last brought bytes (loop time), and its response headers: the
    idle watch of a model call (model/call_guard.py) and the provider's rate gate read them. Set for
    the call's task through `ACTIVITY`, so the API adapters need not pass it along."""

    __slots__ = ("headers", "last")

    def __init__(self, now: float) -> None:
        self.last = now
        self.headers: httpx2.Headers | None = None


ACTIVITY: ContextVar[Activity | None] = ContextVar("model_stream_activity", default=None)


def _reads(response: httpx2.Response) -> AsyncIterable[bytes]:
    body = _body(response)
    timer = ReadTimer.take_over(response)
    return body if timer is None else timer.watch(body)


class ReadTimer:
    """The body's read timeout (httpx's `read`, aiohttp's `sock_read`: the openai client's 600 s), kept
    by one timer per timeout instead of aiohttp's, which re-arms a timer for every TCP segment: a
    provider flushes each token in one, and a `call_later` and a `cancel` per token were ~1.8 µs of
    the runtime's CPU per chunk (bench/results/stream.md "Session 15"). It counts the time a read of
    ours has waited for bytes (reads are one per tick, sender.py), so a stream that stops sending
    fails as it did: aiohttp's own error on the body (`SocketTimeoutError`, httpx's `ReadTimeout`).
    Only for httpx-aiohttp's stream (GAMMA_MODEL_HTTP=aiohttp); any other keeps its transport's."""

    def __init__(self, timeout_s: float, content: aiohttp.StreamReader) -> None:
        self.timeout_s = timeout_s
        self.content = content
        self.waiting_since: float | None = None  # when the read under way started (loop time)
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(timeout_s, self._check)

    @classmethod
    def take_over(cls, response: httpx2.Response) -> ReadTimer | None:
        # httpx's bound stream around httpx-aiohttp's: private names, pinned by a unit test
        # (test_sse_read_timeout.py); without them aiohttp's own timer stays in charge.
        raw = getattr(getattr(response.stream, "_stream", None), "_aiohttp_response", None)
        connection = raw.connection if isinstance(raw, aiohttp.ClientResponse) else None
        protocol = connection.protocol if connection is not None else None
        if raw is None or protocol is None or not protocol.read_timeout:
            return None
        timeout_s = protocol.read_timeout
        protocol.read_timeout = None  # set per request by aiohttp: the connection's next request has its own
        return cls(timeout_s, raw.content)

    async def watch(self, body: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        reads = body.__aiter__()
        try:
            while True:
                self.waiting_since = self._loop.time()
                try:
                    chunk = await reads.__anext__()
                except StopAsyncIteration:
                    return
                self.waiting_since = None
                yield chunk
        finally:
            self.stop()

    def stop(self) -> None:
        self._handle.cancel()

    def _check(self) -> None:
        waited = self._loop.time() - self.waiting_since if self.waiting_since is not None else 0.0
        if waited >= self.timeout_s:  # the read under way ends with aiohttp's own error, as its timer would
            self.content.set_exception(aiohttp.SocketTimeoutError("Timeout on reading data from socket"))
        else:
            self._handle = self._loop.call_later(self.timeout_s - waited, self._check)


def _body(response: httpx2.Response) -> AsyncIterable[bytes]:
    """The body's bytes as the transport hands them over. Without a content encoding that is what
    `aiter_bytes` yields too, minus its two layers of async generators (`aiter_bytes`, `aiter_raw`:
    identity decoder, chunker, byte count) per read: ~2% of the runtime's loop with 200 sessions
    streaming (bench/results/stream.md "Session 11"). An encoded body goes through httpx's decoders.
    The transport's stream maps its errors to httpx's itself (httpx's transport and httpx-aiohttp's)."""
    stream = response.stream
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity") and isinstance(stream, httpx2.AsyncByteStream):
        response.is_stream_consumed = True  # as aiter_raw marks it: a second read raises StreamConsumed
        return stream
    return response.aiter_bytes()


async def json_events(response: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    """Each event's data as a JSON object, one at a time (json_reads, flattened)."""
    async for events in json_reads(response):
        for event in events:
            yield event


def _stream_error(response: httpx2.Response, error: Any) -> openai.APIError:
    message = error.get("message") if isinstance(error, dict) else None
    if not message or not isinstance(message, str):
        message = "An error occurred during streaming"
    return openai.APIError(message=message, request=response.request, body=error)
