"""The events stream's cheap path through the proxy's ASGI stack (services/proxy/edge/sse_response.py): its
body frames reach the server's `send` from the response itself, past every middleware's wrapped
send; the response start and end still go through the stack, and an error still answers JSON.
Frames are counted, not timed (bench/sse_stack.py times them)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.proxy.app import create_app
from services.proxy.edge.heap import TrimAfterLargeResponses
from services.proxy.fanout import Mailbox
from services.proxy.liveness import owned_session
from services.proxy.routes import events
from services.proxy.rows import SessionRow, SessionState
from tests.support.inproc import settings_for

SID = "s_path"


def scope_for(app: Any, query: bytes = b"") -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": f"/sessions/{SID}/events", "raw_path": b"",
            "root_path": "", "query_string": query, "headers": [(b"host", b"proxy")],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {}}


async def serve(app: Any, query: bytes = b"") -> list[tuple[dict[str, Any], str]]:
    """Each message the server's `send` got, with the function that called it."""
    got: list[tuple[dict[str, Any], str]] = []

    async def send(message: dict[str, Any]) -> None:
        caller = sys._getframe(1).f_code
        got.append((message, f"{caller.co_filename.rsplit('/', 1)[-1]}:{caller.co_qualname}"))

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays: the stream ends on its own
        raise AssertionError

    await asyncio.wait_for(app(scope_for(app, query), receive, send), 10)
    return got


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    async def frames(*_: object) -> AsyncIterator[bytes]:
        for n in (1, 2, 3):
            yield f"id: {n}-0\ndata: {{}}\n\n".encode()

    monkeypatch.setattr(events, "event_frames", frames)
    app = create_app(settings_for("redis://127.0.0.1:1/0", tmp_path))
    row = SessionRow(id=SID, owner="alice", created_at=0, updated_at=0)
    app.dependency_overrides[owned_session] = lambda: SessionState(row=row, leased=True, running=True, fence=1)
    return app


async def test_event_frames_skip_the_wrapped_sends_and_the_start_and_end_do_not(app: Any) -> None:
    got = await serve(app)
    start, *body, end = got
    assert start[0]["type"] == "http.response.start" and start[0]["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start[0]["headers"]
    assert start[1] != "sse_response.py:EventStreamResponse.stream_response"  # through the stack
    assert [m["body"] for m, _ in body] == [f"id: {n}-0\ndata: {{}}\n\n".encode() for n in (1, 2, 3)]
    assert {caller for _, caller in body} == {"sse_response.py:EventStreamResponse.stream_response"}
    assert end[0] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert end[1] != "sse_response.py:EventStreamResponse.stream_response"


async def test_a_refused_stream_still_answers_json_through_the_stack(app: Any) -> None:
    got = await serve(app, b"last_event_id=nonsense")
    assert got[0][0]["status"] == 400
    assert "Last-Event-ID" in json.loads(b"".join(m.get("body", b"") for m, _ in got[1:]))["error"]


async def test_the_trim_middleware_passes_an_event_stream_through_untouched() -> None:
    seen: list[tuple[object, object]] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append((receive, send))

    async def receive() -> dict[str, Any]:
        return {}

    async def send(_: dict[str, Any]) -> None:
        return None

    trim = TrimAfterLargeResponses(inner, passthrough=r"^/sessions/[^/]+/events$")
    if trim._trim is None:
        pytest.skip("no malloc_trim here: the middleware wraps nothing anyway")
    await trim({"type": "http", "path": f"/sessions/{SID}/events"}, receive, send)
    await trim({"type": "http", "path": f"/sessions/{SID}/transcript"}, receive, send)
    assert seen[0] == (receive, send)  # the stream's own callables
    assert seen[1][0] is not receive and seen[1][1] is not send  # a transcript's bytes are counted


async def test_the_mailbox_is_bounded_fifo_and_wakes_its_reader() -> None:
    box = Mailbox(2)
    reader = asyncio.ensure_future(box.get())
    await asyncio.sleep(0)
    box.put_nowait(("1-0", "a", None))
    assert await reader == ("1-0", "a", None)
    box.put_nowait(("2-0", "b", None))
    box.put_nowait(None)
    assert box.full()
    with pytest.raises(asyncio.QueueFull):
        box.put_nowait(("3-0", "c", None))
    assert [box.get_nowait(), await box.get()] == [("2-0", "b", None), None] and box.empty()
    with pytest.raises(asyncio.QueueEmpty):
        box.get_nowait()
    cancelled = asyncio.ensure_future(box.get())  # a client that went away while it waited
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    box.put_nowait(("4-0", "d", None))  # no error; the item waits for the next reader
    assert await box.get() == ("4-0", "d", None)


async def test_a_large_response_is_trimmed_after_it_ends_and_once_more_a_moment_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a response held past its end (the transport's write buffer, late frees) is returned by a
    second trim, without waiting for the next large response."""
    import services.proxy.edge.heap as heap

    monkeypatch.setattr(heap, "MIN_INTERVAL_S", 0.05)
    trims: list[float] = []

    async def big(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * (2 * 1024 * 1024)})

    async def sink(message: Any) -> None:
        return None

    middleware = heap.TrimAfterLargeResponses(big)
    middleware._trim = lambda: trims.append(time.monotonic())  # type: ignore[assignment]
    await middleware({"type": "http", "path": "/sessions/s/preview"}, sink, sink)
    for _ in range(100):
        if len(trims) >= 2 and middleware._task is None:
            break
        await asyncio.sleep(0.02)
    assert len(trims) == 2 and trims[1] - trims[0] >= 0.04
