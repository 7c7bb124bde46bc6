"""`GET /sessions/{sid}/events`: the session's events stream as server-sent events.

Each SSE `id` is the stream entry id, so a client resumes with `Last-Event-ID` (header, or the
`last_event_id` query for clients that cannot set headers). `0` replays everything retained, `$`
starts at the newest entry. A comment line goes out when nothing arrived for a heartbeat interval,
which also notices a client that went away; the generator ends when the client disconnects.
Live entries come from the process's fan-out (services/proxy/fanout.py), not from a Redis
connection per client; a user may hold GAMMA_SSE_MAX_STREAMS_PER_USER streams per proxy process.
When entries after the client's position are gone (a dormant session's stream swept after
GAMMA_DORMANT_RETENTION_S, or capped by MAXLEN) an `event: reset` frame comes first: reload from
GET /transcript, then apply what follows (docs/integration.md "Dormant sessions in Redis").
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import redis.asyncio as aioredis
import structlog
from fastapi import APIRouter, Depends, Header, Query
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind

from services.proxy.deps import Proxy, get_proxy
from services.proxy.edge.errors import ApiError
from services.proxy.edge.sse_response import EventStreamResponse
from services.proxy.fanout import HEARTBEAT, EventFanout, Item, Subscriber
from services.proxy.liveness import owned_session
from services.proxy.rows import SessionState
from shared.contracts.streams.events import SessionEvent
from shared.redis import keys
from shared.redis.deletion import is_deleted
from shared.redis.redis_wire import parse_id, text
from shared.telemetry.tracing import start_span

router = APIRouter(prefix="/sessions", tags=["events"])
STREAM_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
BATCH = 200
MAX_SEQ = 2**64 - 1
log = structlog.get_logger()


def start_id(header: str | None, query: str | None) -> str:
    value = (header or query or "0").strip()
    if value != "$" and not STREAM_ID.match(value):
        raise ApiError(400, f"Last-Event-ID must be a stream id like 1700000000000-0, '0' or '$', got {value[:60]!r}")
    return value


def sse_frame(entry_id: str, data: str) -> bytes:
    if "\n" not in data:  # event JSON has no raw newlines: one data line
        return f"id: {entry_id}\ndata: {data}\n\n".encode()
    # Split defensively so a multi-line payload stays one event.
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"id: {entry_id}\n{lines}\n".encode()


async def resolve_start(redis: aioredis.Redis, stream: str, start: str) -> str:
    if start != "$":
        return start
    newest = await redis.xrevrange(stream, count=1)
    return text(newest[0][0]) if newest else "0"


def _after(entry_id: str) -> str:
    """An exclusive XRANGE start: the entries after `entry_id`."""
    return "(" + (entry_id if "-" in entry_id else entry_id + "-0")


async def replay(redis: aioredis.Redis, stream: str, last: str) -> AsyncIterator[tuple[str, str, str | None]]:
    """What the stream holds after `last`, read in batches until it has no more: (id, event JSON,
    the traceparent of the run that made it)."""
    while True:
        entries: Any = await redis.xrange(stream, min=_after(last), count=BATCH)
        if not entries:
            return
        for entry_id, fields in entries:
            last = text(entry_id)
            data = fields.get(b"data", fields.get("data"))
            parent = fields.get(b"traceparent", fields.get("traceparent"))
            if data is not None:
                yield last, text(data), text(parent) if parent is not None else None


def _before(entry_id: str) -> str:
    """The greatest stream id below `entry_id`."""
    ms, seq = parse_id(entry_id)
    return f"{ms}-{seq - 1}" if seq > 0 else f"{max(ms - 1, 0)}-{MAX_SEQ}"


async def history_gap(redis: aioredis.Redis, sid: str, start: str, last: str) -> str | None:
    """The id to resume from after a `reset`, or None when the stream still holds everything after
    the client's position. Gone are the entries up to the row's `events_swept` (the dormant sweep
    deleted the stream, shared/redis/dormancy.py) and those below the first entry of a stream capped by
    MAXLEN. `0` asks for the whole history: a gap only when a sweep dropped some; `$` never has one.
    A position beyond the newest entry (or any position in a stream that never held one) was never
    sent by this stream: the client's view cannot be trusted either, so it reloads too, and resumes
    from the newest entry (a client waiting for ids above it would miss everything)."""
    if start == "$":
        return None
    pipe = redis.pipeline(transaction=False)
    pipe.hget(keys.session_row(sid), keys.EVENTS_SWEPT_FIELD)
    pipe.xrange(keys.events(sid), count=1)
    pipe.xrevrange(keys.events(sid), count=1)
    swept_raw, first_raw, newest_raw = await pipe.execute()
    swept = text(swept_raw) if swept_raw else None
    first = text(first_raw[0][0]) if first_raw else None
    newest = text(newest_raw[0][0]) if newest_raw else swept
    if start == "0" or parse_id(start) == (0, 0):
        return swept
    if newest is None or parse_id(start) > parse_id(newest):
        return newest or "0"
    if swept is not None and parse_id(last) < parse_id(swept):
        return swept
    if swept is None and first is not None and parse_id(last) < parse_id(_before(first)):
        return _before(first)
    return None


def reset_frame(sid: str, resume: str, last_event_id: str) -> bytes:
    """A named SSE event (`event: reset`): reload the history from GET /transcript (paged), then
    apply the events that follow on this connection. Its id is where they start, so a reconnect
    after it does not get the reset again. `reason`: history_expired (entries after the client's
    position are gone) or unknown_position (the position is beyond anything the stream sent)."""
    ahead = last_event_id not in ("0", "$") and parse_id(last_event_id) > parse_id(resume)
    data = json.dumps({"type": "reset", "reason": "unknown_position" if ahead else "history_expired",
                       "session_id": sid,
                       "last_event_id": last_event_id, "transcript": f"/sessions/{sid}/transcript"})
    return f"event: reset\nid: {resume}\ndata: {data}\n\n".encode()


async def event_frames(fanout: EventFanout, redis: aioredis.Redis, sid: str, user: str,
                       start: str) -> AsyncIterator[bytes]:
    """Joins the fan-out first, then replays from the stream, then follows the fan-out's entries:
    whatever was appended during the replay is on the queue, and what the replay already sent is
    skipped by id, so the seam has neither a gap nor a duplicate."""
    stream = keys.events(sid)
    sub = await fanout.subscribe(sid, user)
    try:
        last = await resolve_start(redis, stream, start)
        yield b"retry: 2000\n: connected\n\n"
        reset = await history_gap(redis, sid, start, last)
        if reset is not None:  # entries after the client's position are gone: it reloads from disk
            log.info("sse_history_reset", session_id=sid, last_event_id=start, resume=reset)
            yield reset_frame(sid, reset, start)
            last = reset
        traces = Deliveries(sid)
        async for entry_id, data, parent in replay(redis, stream, last):
            last = entry_id
            fresh = traces.new(parent) if parent is not None else None
            if fresh is None:
                yield sse_frame(entry_id, data)
            else:
                with traces.delivering(fresh, entry_id, 1):
                    yield sse_frame(entry_id, data)
        sent = parse_id(last)
        while True:
            # No timer of its own: the fan-out offers a heartbeat when nothing came for an interval.
            if sub.queue.empty():
                await sub.queue.wait()  # one reader: an item is in when it is done
            item = sub.queue.get_nowait()
            if item is HEARTBEAT:
                if await is_deleted(redis, sid):  # deleted through another proxy
                    yield b": closed (deleted)\n\n"
                    return
                yield b": heartbeat\n\n"  # also how a client that went away is noticed
                continue
            frames, sent, closed, parent, count = _drain(sub, item, sent, traces)
            if frames and parent is None:
                yield frames
            elif frames and parent is not None:
                with traces.delivering(parent, text_id(sent), count):
                    yield frames
            if closed:
                log.info("sse_stream_closed", session_id=sid, reason=sub.closed)
                yield f": closed ({sub.closed})\n\n".encode()
                return
    finally:
        fanout.unsubscribe(sub)


def text_id(at: tuple[int, int]) -> str:
    return f"{at[0]}-{at[1]}"


Drained = tuple[bytes, tuple[int, int], bool, str | None, int]


def _drain(sub: Subscriber, item: Item, sent: tuple[int, int], traces: Deliveries) -> Drained:
    """`item` and everything already queued behind it as one write (the entries of one fan-out read
    arrive together: one send to the client each, not one per entry); entries the replay already
    sent are skipped by id. Returns (frames, the last id sent, closed, the traceparent of a run
    this client gets events of for the first time, the number of events)."""
    frames: list[bytes] = []
    fresh: str | None = None
    while True:
        if item is None:
            return b"".join(frames), sent, True, fresh, len(frames)
        entry_id, data, parent = item
        if item is not HEARTBEAT and (at := parse_id(entry_id)) > sent:
            sent = at
            frames.append(sse_frame(entry_id, data))
            if parent is not None:
                fresh = traces.new(parent) or fresh
        if sub.queue.empty():
            return b"".join(frames), sent, False, fresh, len(frames)
        item = sub.queue.get_nowait()


@router.get("/{sid}/events", response_class=EventStreamResponse, responses={
    200: {"description": "text/event-stream: each `data:` is one SessionEvent (JSON), its `id:` the resume point "
          "for Last-Event-ID; `event: reset` asks for a reload; comment lines are heartbeats",
          "content": {"text/event-stream": {"schema": SessionEvent.model_json_schema()}}},
    400: {"description": "invalid Last-Event-ID"}, 401: {"description": "missing or unknown token"},
    404: {"description": "no such session for this user"},
    429: {"description": "the user has GAMMA_SSE_MAX_STREAMS_PER_USER event streams open"},
})
async def events(
    last_event_id: str | None = Header(None),
    last_event_id_query: str | None = Query(None, alias="last_event_id", max_length=64),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> EventStreamResponse:
    start = start_id(last_event_id, last_event_id_query)
    user, cap = state.row.owner, proxy.settings.limits.sse_max_streams_per_user
    if proxy.fanout.streams_of(user) >= cap:
        raise ApiError(429, f"too many open event streams: at most {cap} per user; close one first")
    return EventStreamResponse(
        event_frames(proxy.fanout, proxy.redis, state.row.id, user, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# The SSE delivery span: an event written to a client continues the trace of the run that made it (the
# `traceparent` the runtime puts beside the event, shared/contracts/streams/events.py `EventEntry`). One span per run
# a client gets events of, on the write that carries the run's first event, never one per event: streamed
# text comes as many small events (docs/architecture.md "Observability").
SPAN_NAME = "gamma:{sid}:events deliver"


class Deliveries:
    """One SSE client's delivery spans."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.last: str | None = None  # the run trace this client last got a span for
        # Made in the events request's context: each delivery span links to that request's span.
        request = trace.get_current_span().get_span_context()
        self.links = [Link(request)] if request.is_valid and request.trace_flags.sampled else []

    def new(self, parent: str | None) -> str | None:
        """`parent` when this client has not had a span for it yet (the run's first event), else None."""
        if parent is None or parent == self.last:
            return None
        self.last = parent
        return parent

    @contextmanager
    def delivering(self, parent: str, entry_id: str, events: int) -> Iterator[None]:
        """Around the write of a batch of frames: a span in the run's trace. Never made current: the
        write is a generator's yield (shared/telemetry/tracing.py `start_span`)."""
        span = start_span(SPAN_NAME, parent, SpanKind.PRODUCER, links=self.links, attributes={
            "messaging.system": "sse", "messaging.operation.type": "send",
            "messaging.destination.name": "gamma:{sid}:events", "gamma.session_id": self.sid,
            "gamma.sse.entry_id": entry_id, "messaging.batch.message_count": events})
        try:
            yield
        finally:
            span.end()
