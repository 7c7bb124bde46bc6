"""`GET /sessions/{sid}/events`: the session's events stream as server-sent events.

Each SSE `id` is the stream entry id, so a client resumes with `Last-Event-ID` (header, or the
`last_event_id` query for clients that cannot set headers). `0` replays everything retained, `$`
starts at the newest entry. A comment line goes out when nothing arrived for a heartbeat interval,
which also notices a client that went away; the generator ends when the client disconnects.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse

from shared import keys

from ..deps import Proxy, get_proxy
from ..errors import ApiError
from ..liveness import owned_session
from ..rows import SessionState

router = APIRouter(prefix="/sessions", tags=["events"])
STREAM_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
BATCH = 200


def start_id(header: str | None, query: str | None) -> str:
    value = (header or query or "0").strip()
    if value != "$" and not STREAM_ID.match(value):
        raise ApiError(400, f"Last-Event-ID must be a stream id like 1700000000000-0, '0' or '$', got {value[:60]!r}")
    return value


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def sse_frame(entry_id: str, data: str) -> bytes:
    # Event JSON has no raw newlines; split defensively so a multi-line payload stays one event.
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"id: {entry_id}\n{lines}\n".encode()


async def resolve_start(redis: aioredis.Redis, stream: str, start: str) -> str:
    if start != "$":
        return start
    newest = await redis.xrevrange(stream, count=1)
    return _s(newest[0][0]) if newest else "0"


def _drop_result(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved, so an error of an abandoned read is not reported as unhandled


async def _read(redis: aioredis.Redis, stream: str, last: str, heartbeat_s: float) -> Any:
    """XREAD BLOCK for at most one heartbeat, shielded from cancellation.

    Starlette cancels the response task when the client disconnects. Cancelling a redis-py command in
    flight can leave its connection (and the task) hanging, so the read is left to finish on its own,
    within one heartbeat, and its connection goes back to the pool clean.
    """
    read = asyncio.ensure_future(redis.xread({stream: last}, count=BATCH, block=int(heartbeat_s * 1000)))
    try:
        return await asyncio.shield(read)
    except asyncio.CancelledError:
        read.add_done_callback(_drop_result)
        raise


async def event_frames(request: Request, redis: aioredis.Redis, sid: str, start: str,
                       heartbeat_s: float) -> AsyncIterator[bytes]:
    stream = keys.events(sid)
    last = await resolve_start(redis, stream, start)
    yield b"retry: 2000\n: connected\n\n"
    while not await request.is_disconnected():
        reply: Any = await _read(redis, stream, last, heartbeat_s)
        if not reply:
            yield b": heartbeat\n\n"
            continue
        for _, entries in reply:
            for entry_id, fields in entries:
                last = _s(entry_id)
                data = fields.get(b"data", fields.get("data"))
                if data is None:
                    continue
                yield sse_frame(last, _s(data))


@router.get("/{sid}/events", response_class=StreamingResponse, responses={
    200: {"description": "text/event-stream of SessionEvent JSON", "content": {"text/event-stream": {}}},
    400: {"description": "invalid Last-Event-ID"}, 401: {"description": "missing or unknown token"},
    404: {"description": "no such session for this user"},
})
async def events(
    request: Request, last_event_id: str | None = Header(None),
    last_event_id_query: str | None = Query(None, alias="last_event_id", max_length=64),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> StreamingResponse:
    start = start_id(last_event_id, last_event_id_query)
    return StreamingResponse(
        event_frames(request, proxy.redis, state.row.id, start, proxy.settings.sse_heartbeat_s),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
