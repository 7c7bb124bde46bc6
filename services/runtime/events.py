"""Outgoing messages of a session: events (XADD MAXLEN ~), replies, and the service-level streams."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel

from shared import keys
from shared.contracts.events import TRACEPARENT_FIELD, EventType, SessionEvent
from shared.contracts.inbox import InboxReply
from shared.redis_wire import text

from .lease import LeaseLost
from .ticker import DeltaTicker

log = structlog.get_logger()
EVENTS_MAXLEN = 10_000
REPLY_TTL_S = 60

# (stream, model) -> publish through the bus (FastStream) so consumers get the usual envelope.
BusPublish = Callable[[str, BaseModel], Awaitable[Any]]
# Raises LeaseLost unless the session's lease is ours at this instant (Lease.check).
Fence = Callable[[], Awaitable[None]]


async def _unfenced() -> None:
    return None


# A queued progress event: (event, `also`, the deltas merged into it - joined when sent, so merging
# stays O(1) per token, the run's traceparent).
Queued = tuple[SessionEvent, Callable[[Any], Any] | None, list[str] | None, str | None]


def entry(ev: SessionEvent, parent: str | None) -> dict[Any, Any]:
    """The events stream entry of `ev`: its JSON, and the traceparent of the (recorded) run that made
    it, read by the proxy for its SSE delivery span (shared/contracts/events.py `EventEntry`)."""
    fields: dict[Any, Any] = {"data": ev.model_dump_json()}
    if parent is not None:
        fields[TRACEPARENT_FIELD] = parent
    return fields


class Outbox:
    """Everything goes out fenced: a worker that lost the session's lease (or was paused past it)
    publishes nothing more for it. Only the announcements made after releasing the lease on
    purpose (the dormant status) pass `fenced=False`.

    Progress events (`event(..., wait=False)`: a run or a message starting, streamed text) do not
    hold up the run: they are queued and sent in order, batched into one pipeline, by a background
    send, and always before the next awaited event (which drains them first), so a client reads every
    event in the order the engine made them. A failed background send keeps its batch for the next
    awaited event, which raises if Redis still fails, as it would have without the queue.

    Streamed text (`message_update` with only a `delta`) comes one token per chunk from a real model
    (80 a second per session): one XADD each made Redis, the proxy's fan-out and every SSE client
    pay per token. A delta that follows a queued delta is appended to it, and the background send
    waits `coalesce_s` after the first one, so a session sends one event per window instead of one per
    token (bench-stream). An awaited event still drains the queue at once: coalescing never delays it.
    With a `ticker` (the worker's DeltaTicker) queued deltas go out with the next tick, in one
    pipeline with every other session's, instead of a round trip per session per window."""

    def __init__(self, client: aioredis.Redis, sid: str, bus: BusPublish, fence: Fence = _unfenced,
                 coalesce_s: float = 0.0, ticker: DeltaTicker | None = None) -> None:
        self.client = client
        self.sid = sid
        self.bus = bus
        self.fence = fence
        self.coalesce_s = coalesce_s
        self.ticker = ticker if coalesce_s > 0 else None
        self.run_id: str | None = None  # stamped on every event while a run is active (the supervisor sets it)
        self.traceparent: str | None = None  # the recorded run span's, likewise (never per-chunk spans)
        self._queued: list[Queued] = []
        self._sending = asyncio.Lock()  # one sender at a time: the stream keeps the engine's order
        self._background: asyncio.Task[None] | None = None

    async def event(self, type: EventType, data: dict[str, Any] | None = None,
                    also: Callable[[Any], Any] | None = None, *, fenced: bool = True,
                    wait: bool = True) -> str | None:
        """XADD one event and return its stream id (None when queued: `wait=False`); `also` adds
        commands to the same round trip (a non-transactional pipeline)."""
        data = data or {}
        if not wait:
            delta = self.coalesce_s > 0 and also is None and _delta_only(type, data)
            if delta and self._queued and self._queued[-1][2] is not None:
                self._queued[-1][2].append(data["delta"])  # still unsent (see _send_queued); joined once
                return None
            ev = SessionEvent(type=type, session_id=self.sid, data=data, run_id=self.run_id)
            self._queued.append((ev, also, [data["delta"]] if delta else None, self.traceparent))
            if self.ticker is not None and self._queued[0][2] is not None:
                self.ticker.want(self)
            elif self._background is None or self._background.done():
                wait_s = self.coalesce_s if delta else 0.0
                self._background = asyncio.ensure_future(self._send_in_background(wait_s))
            return None
        ev = SessionEvent(type=type, session_id=self.sid, data=data, run_id=self.run_id)
        async with self._sending:
            await self._send_queued(fenced)
            if fenced:
                await self.fence()
            pipe = self.client.pipeline(transaction=False)
            pipe.xadd(keys.events(self.sid), entry(ev, self.traceparent), maxlen=EVENTS_MAXLEN, approximate=True)
            if also is not None:
                also(pipe)
            added = (await pipe.execute())[0]
        return text(added)

    async def _send_in_background(self, wait_s: float = 0.0) -> None:
        while True:
            if wait_s > 0:
                await asyncio.sleep(wait_s)  # more deltas join the queued one meanwhile
            async with self._sending:
                try:
                    await self._send_queued(fenced=True, once=True)
                except Exception as exc:  # noqa: BLE001 - kept queued; the next awaited event retries and raises
                    log.warning("progress_events_deferred", session_id=self.sid, error=repr(exc))
                    return
            if not self._queued:
                return
            if self.ticker is not None and self._queued[0][2] is not None:
                self.ticker.want(self)
                return
            # What queued during the round trip: a delta waits its own window (else the next send would
            # carry the one or two tokens that arrived meanwhile), anything else goes at once.
            wait_s = self.coalesce_s if self._queued[0][2] is not None else 0.0

    async def _send_queued(self, fenced: bool, once: bool = False) -> None:
        """Caller holds `_sending`. `once`: one batch (what is queued now), not until the queue is empty."""
        while self._queued:
            try:
                await self.fence()
            except LeaseLost:
                if fenced:
                    raise
                self._queued.clear()  # the lease was given up: the ended holder's progress is dropped
                return
            batch, self._queued = self._queued, []  # taken whole: later deltas merge only into unsent events
            pipe = self.client.pipeline(transaction=False)
            self.add_commands(pipe, batch)
            try:
                await pipe.execute()
            except BaseException:
                self._queued = batch + self._queued
                raise
            if once:
                return

    # The DeltaTicker's side: it holds `sending` from take_batch until its pipeline has run.
    @property
    def sending(self) -> asyncio.Lock:
        return self._sending

    def has_queued(self) -> bool:
        return bool(self._queued)

    async def take_batch(self) -> list[Queued]:
        """Everything queued, once the lease is checked (raises LeaseLost, keeping the queue)."""
        await self.fence()
        batch, self._queued = self._queued, []
        return batch

    def give_back(self, batch: list[Queued]) -> None:
        self._queued = batch + self._queued

    def add_commands(self, pipe: Any, batch: list[Queued]) -> None:
        for ev, also, parts, parent in batch:
            if parts is not None and len(parts) > 1:
                ev.data = {"delta": "".join(parts)}
            pipe.xadd(keys.events(self.sid), entry(ev, parent), maxlen=EVENTS_MAXLEN, approximate=True)
            if also is not None:
                also(pipe)

    async def reply(self, request_id: str, status: int, body: dict[str, Any], *, fenced: bool = True) -> None:
        key = keys.reply(self.sid, request_id)
        payload = InboxReply(request_id=request_id, status=status, body=body).model_dump_json()
        if fenced:
            await self.fence()
        pipe = self.client.pipeline(transaction=True)
        pipe.rpush(key, payload)
        pipe.expire(key, REPLY_TTL_S)
        await pipe.execute()

    async def publish(self, stream: str, message: BaseModel) -> None:
        """To a service stream (another owner's input). Progress events queued before it wait until it
        is out: sending them first would hold the event loop, and delay this message (an injection's
        `InjectionRecorded`, which its owner waits for) by ~1 ms (bench-inject); the session's own
        event stream keeps its order either way."""
        async with self._sending:
            await self.fence()
            await self.bus(stream, message)


def _delta_only(type: str, data: dict[str, Any]) -> bool:
    """Streamed text that can be appended to the previous one (not a restart notice, not an image)."""
    return type == "message_update" and data.keys() == {"delta"} and isinstance(data["delta"], str)
