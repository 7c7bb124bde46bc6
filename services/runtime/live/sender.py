"""The worker's EventSender: the one owner of every session's event queue, the coalescing tick, and
the XADDs to the sessions' event streams.

An Outbox (events.py) only hands events over: progress events (`wait=False`: a run or a message
starting, streamed text) are queued here and never hold up the run; an awaited event is sent once
every event queued before it is out, so a client reads every event in the order the engine made
them (docs/architecture.md, "Streaming at scale").

Streamed text comes one token per chunk from a real model (80 a second per session): one XADD each
made Redis, the proxy's fan-out and every SSE client pay per token. A text delta that follows a
queued delta is appended to it, and queued deltas wait for the next tick, where one pipeline carries
the events of every session of the worker: one round trip per tick, not one per session per window
(bench-stream). Any other progress event goes out at once: the sessions that queued one in the same
turn of the event loop share a pipeline. An awaited event never waits for the tick.

Ordering and fencing: a send takes a session's queue only while no other send of that session holds
its lock (held until the pipeline has run), and checks the session's lease before taking its batch
(a lease check passes only with at least half a lease of validity left, far more than a round trip).
A failed pipeline gives every session its batch back, in front: the session's next awaited event
sends it, or raises as it would have without the queue.

The sender is also the read gate of the sessions' model streams (model/sse.py ReadGate): a stream
read waits for the gate, which opens just before each tick (`lead_s`). A token that arrived meanwhile
waited in the socket instead of the queue, for the same tick: no added latency, and one read, one
parse loop and one wake-up per session per tick instead of one per token.

The window adapts to the load (`sends_per_s`): what a short window costs is events per second (Redis,
the proxy's fan-out and every SSE client pay per XADD), and what it buys is latency (a token waits
half a window on average). With few streaming sessions the worker ticks every `min_period_s`; with
more, the period grows so that one event per streaming session per tick stays within `sends_per_s`,
up to `period_s`. `period_s` 0: no coalescing, every progress event goes out at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import structlog
from redis.exceptions import NoScriptError

from services.runtime.live.lease import LeaseLost
from shared.contracts.base import now_ms
from shared.contracts.streams.events import TRACEPARENT_FIELD, SessionEvent
from shared.redis import keys, redis_cluster
from shared.redis.redis_wire import text

log = structlog.get_logger()
EVENTS_MAXLEN = 10_000

# Raises LeaseLost unless the session's lease is ours at this instant (Lease.check).
Fence = Callable[[], Awaitable[None]]
# Adds commands to an event's round trip (a non-transactional pipeline).
Also = Callable[[Any], Any]


class Pipelines(Protocol):
    """What the sender needs of a Redis client (redis.asyncio.Redis): pipelines, and commands (the
    batch script)."""

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Any: ...

    async def execute_command(self, *args: Any, **options: Any) -> Any: ...


# A batch's XADDs in one command: KEYS the streams (repeated, in order), ARGV[1] the MAXLEN, then each
# entry's data. One reply instead of one per XADD: redis-py's pipeline spent ~10 µs of the runtime's
# loop per command, packing it and reading its reply (bench-stream). A single Redis only: on a
# cluster the streams of a batch live in many slots, and the batch goes as a pipeline.
XADD_ALL = """
for i, key in ipairs(KEYS) do
  redis.call('XADD', key, 'MAXLEN', '~', ARGV[1], '*', 'data', ARGV[i + 1])
end
return #KEYS
"""
XADD_ALL_SHA = hashlib.sha1(XADD_ALL.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1


@dataclass(eq=False, slots=True)
class Text:
    """Streamed text: the deltas merged into one event (joined when sent, so merging stays O(1) per
    token), with what the event is stamped with when the first of them is queued."""
    parts: list[str]
    ts: int
    run_id: str | None
    parent: str | None = None  # the recorded run span's traceparent (shared/telemetry/tracing.py)


@dataclass(eq=False, slots=True)
class Queued:
    """A queued progress event: `event`, or streamed text whose JSON is made when it is sent."""
    event: SessionEvent | None = None
    also: Also | None = None
    text: Text | None = None
    parent: str | None = None  # the recorded run span's traceparent (shared/telemetry/tracing.py)

    def traceparent(self) -> str | None:
        return self.text.parent if self.text is not None else self.parent


def entry_fields(data: str, parent: str | None) -> dict[str, str]:
    """An events stream entry: the event's JSON, and the traceparent of the (recorded) run that made
    it, read by the proxy for its SSE delivery span (shared/contracts/streams/events.py `EventEntry`)."""
    return {"data": data} if parent is None else {"data": data, TRACEPARENT_FIELD: parent}


def text_event_json(sid: str, text: Text) -> str:
    """A streamed-text event's entry, as SessionEvent.model_dump_json makes it, without building the
    model: one a token (or a tick's worth) was ~14 µs with pydantic, ~1.2 with orjson (bench-stream)."""
    delta = text.parts[0] if len(text.parts) == 1 else "".join(text.parts)
    try:
        return orjson.dumps({"type": "message_update", "session_id": sid, "ts": text.ts,
                             "data": {"delta": delta}, "run_id": text.run_id}).decode()
    except TypeError:  # what orjson refuses (a lone surrogate): the model decides, as for any event
        return SessionEvent(type="message_update", session_id=sid, ts=text.ts, data={"delta": delta},
                            run_id=text.run_id).model_dump_json()


@dataclass(eq=False)
class SessionQueue:
    """One session's queue; only the EventSender reads or changes it."""
    sid: str
    fence: Fence
    stream: str = ""
    items: list[Queued] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one send at a time: the engine's order

    def __post_init__(self) -> None:
        self.stream = keys.events(self.sid)


class EventSender:
    def __init__(self, client: Pipelines, period_s: float = 0.0, lead_s: float = 0.002, *,
                 min_period_s: float | None = None, sends_per_s: float = 0.0) -> None:
        self.client = client
        self._cluster = redis_cluster.cluster_of(client) is not None
        self.period_s = period_s  # the window at load (and always, without `sends_per_s`); 0: no coalescing
        self.min_period_s = period_s if min_period_s is None else min(min_period_s, period_s)
        self.sends_per_s = sends_per_s  # the worker's budget of streamed-text events per second; 0: fixed
        self.lead_s = min(lead_s, self.min_period_s / 4)  # the gate opens this long before the tick collects
        self._ticked: dict[SessionQueue, None] = {}  # insertion-ordered sets: queued deltas, for the tick
        self._urgent: dict[SessionQueue, None] = {}  # anything else queued first: sent at once
        self._gate: list[asyncio.Future[None]] = []  # the streams waiting for the next opening of the gate
        self.streaming = 0  # sessions that read or sent streamed text at the last tick: the load
        self._tick_task: asyncio.Task[None] | None = None
        self._urgent_task: asyncio.Task[None] | None = None
        self.ticks = 0  # pipelines sent by the tick (tests, metrics)

    def queue(self, sid: str, fence: Fence) -> SessionQueue:
        return SessionQueue(sid=sid, fence=fence)

    # ------------------------------------------------------------ the Outbox's side

    def enqueue(self, q: SessionQueue, event: SessionEvent, also: Also | None, parent: str | None = None) -> None:
        """A progress event other than streamed text: sent at once (after what is queued before it)."""
        q.items.append(Queued(event, also, parent=parent))
        if len(q.items) == 1:
            self._schedule(q)

    def enqueue_text(self, q: SessionQueue, delta: str, run_id: str | None, parent: str | None = None) -> None:
        """Streamed text (a `message_update` with only a `delta`): appended to the text queued last
        when coalescing, and sent with the next tick."""
        last = q.items[-1].text if q.items and self.period_s > 0 else None
        if last is not None and last.run_id == run_id and last.parent == parent:
            last.parts.append(delta)  # still unsent (see _take): joined once
            return
        q.items.append(Queued(text=Text([delta], now_ms(), run_id, parent)))
        if len(q.items) == 1:
            self._schedule(q)

    async def send(self, q: SessionQueue, event: SessionEvent, also: Also | None, *, fenced: bool,
                   parent: str | None = None) -> str:
        """XADD `event` after everything queued before it; returns its stream id. Not fenced
        (`fenced=False`: an announcement after giving the lease up on purpose): the queue, that
        ended holder's progress, is dropped if the lease is gone."""
        async with q.lock:
            try:
                while q.items:
                    batch = await self._take(q)
                    await self._execute([(q, batch)])
                if fenced:
                    await q.fence()
            except LeaseLost:
                if fenced:
                    raise
                q.items.clear()
            pipe = self.client.pipeline(transaction=False)
            pipe.xadd(q.stream, entry_fields(event.model_dump_json(), parent), maxlen=EVENTS_MAXLEN, approximate=True)
            if also is not None:
                also(pipe)
            entry = (await pipe.execute())[0]
        self._reschedule(q)
        return text(entry)

    async def exclusive(self, q: SessionQueue, action: Callable[[], Awaitable[object]]) -> None:
        """`action` while no event of the session is being sent (fenced). What is queued waits until it
        is done: sending it first would delay `action` (an InjectionRecorded its owner waits for) by
        about a millisecond (bench-inject); the session's stream keeps its order either way."""
        async with q.lock:
            await q.fence()
            await action()
        self._reschedule(q)

    # ------------------------------------------------------------ the read gate

    async def wait(self) -> None:
        """The read gate (ReadGate): returns when the gate opens next, just before a tick."""
        # A future per reader, not one shared (and shielded) future: one reader cancelled (an abort)
        # cancels only its own, and a shield cost two futures and their callbacks per read.
        gate = asyncio.get_running_loop().create_future()
        self._gate.append(gate)
        self._ensure_ticking()
        await gate

    @property
    def idle(self) -> bool:
        """No tick and no send of its own running."""
        return all(t is None or t.done() for t in (self._tick_task, self._urgent_task))

    async def close(self) -> None:
        """Stops the tick and the sends in flight (the worker's shutdown): what is still queued was
        the progress of sessions this worker no longer serves."""
        for task in (self._tick_task, self._urgent_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    def period(self) -> float:
        """The next tick's window: one event per streaming session per tick within `sends_per_s`."""
        if self.sends_per_s <= 0:
            return self.period_s
        return min(self.period_s, max(self.min_period_s, self.streaming / self.sends_per_s))

    # ------------------------------------------------------------ sending

    def _schedule(self, q: SessionQueue) -> None:
        if q.items[0].text is not None and self.period_s > 0:
            self._ticked[q] = None
            self._ensure_ticking()
        else:
            self._urgent[q] = None
            if self._urgent_task is None or self._urgent_task.done():
                self._urgent_task = asyncio.ensure_future(self._send_urgent())

    def _reschedule(self, q: SessionQueue) -> None:
        """After a send of `q`: what was queued meanwhile goes out by its head's rule."""
        if q.items and not q.lock.locked():
            self._schedule(q)

    def _ensure_ticking(self) -> None:
        if self._tick_task is None or self._tick_task.done():
            self._tick_task = asyncio.ensure_future(self._tick_loop())

    def _open_gate(self) -> int:
        """Opens the gate; returns how many streams waited for it."""
        gate, self._gate = self._gate, []
        readers = 0
        for reader in gate:
            if not reader.done():  # not cancelled
                reader.set_result(None)
                readers += 1
        return readers

    async def _send_urgent(self) -> None:
        await asyncio.sleep(0)  # the sessions that queue in this turn of the loop share the pipeline
        while self._urgent:
            due, self._urgent = list(self._urgent), {}
            await self._send_due(due)

    async def _tick_loop(self) -> None:
        try:
            while self._ticked or self._gate:
                await asyncio.sleep(self.period() - self.lead_s)
                readers = self._open_gate()  # the readers take what arrived, queue it, and the tick sends it
                await asyncio.sleep(self.lead_s)
                # A session counts whether its stream read text (gated) or only sent it (ungated). The
                # load is taken at once when it rises, let go slowly (half-life ~70 ticks) when it
                # falls: a worker whose streams end one after the other keeps its window meanwhile.
                self.streaming = max(readers, len(self._ticked), int(self.streaming * 0.99))
                if self._ticked:
                    due, self._ticked = list(self._ticked), {}
                    if await self._send_due(due):
                        self.ticks += 1
        finally:
            self._open_gate()  # never leave a reader waiting on a sender that stopped

    async def _send_due(self, due: list[SessionQueue]) -> bool:
        """One pipeline for the queues of `due`; True when it ran. A queue whose own send is running
        is left to it (an awaited event drains the queue first, and every send reschedules what is
        left); a queue whose lease is gone keeps its batch for its next awaited event, which raises."""
        taken: list[tuple[SessionQueue, list[Queued]]] = []
        lost: set[SessionQueue] = set()
        sent = False
        try:
            for q in due:
                if q.lock.locked() or not q.items:
                    continue
                await q.lock.acquire()
                taken.append((q, []))
                try:
                    taken[-1] = (q, await self._take(q))
                except LeaseLost:
                    lost.add(q)  # kept queued, not rescheduled: its next awaited event raises LeaseLost
            sent = await self._execute(taken)
        except Exception as exc:  # noqa: BLE001 - batches were given back; the next awaited event raises
            log.warning("progress_events_deferred", sessions=len(taken), error=repr(exc))
        finally:
            for q, _ in taken:
                q.lock.release()
                if sent and q not in lost:
                    self._reschedule(q)  # queued meanwhile; after a failure it waits for an awaited event
        return sent

    async def _take(self, q: SessionQueue) -> list[Queued]:
        """Everything queued, once the lease is checked (raises LeaseLost, keeping the queue). Taken
        whole: later deltas merge only into unsent events."""
        await q.fence()
        batch, q.items = q.items, []
        return batch

    async def _execute(self, taken: list[tuple[SessionQueue, list[Queued]]]) -> bool:
        streams: list[str] = []
        entries: list[str] = []
        also = False
        for q, batch in taken:
            for item in batch:
                if item.event is not None:
                    entries.append(item.event.model_dump_json())
                elif item.text is not None:
                    entries.append(text_event_json(q.sid, item.text))
                else:
                    continue
                streams.append(q.stream)
                # The batch script writes `data` only: an event with a command of its own or a
                # traceparent (tracing on) goes through the pipeline.
                also = also or item.also is not None or item.traceparent() is not None
        if not streams:
            return False
        try:
            if also or self._cluster:
                await self._pipeline(taken, entries)
            else:
                await self._script(streams, entries)
        except BaseException:
            for q, batch in taken:
                q.items = batch + q.items  # in front: the session's next awaited event sends it (or raises)
            raise
        return True

    async def _script(self, streams: list[str], entries: list[str]) -> None:
        args = (len(streams), *streams, EVENTS_MAXLEN, *entries)
        try:
            await self.client.execute_command("EVALSHA", XADD_ALL_SHA, *args)
        except NoScriptError:  # a Redis restarted (or flushed its scripts): sent whole once
            await self.client.execute_command("EVAL", XADD_ALL, *args)

    async def _pipeline(self, taken: list[tuple[SessionQueue, list[Queued]]], entries: list[str]) -> None:
        """The XADDs one by one, with the commands events add to their round trip (`also`)."""
        pipe = self.client.pipeline(transaction=False)
        data = iter(entries)
        for q, batch in taken:
            for item in batch:
                if item.event is None and item.text is None:
                    continue
                pipe.xadd(q.stream, entry_fields(next(data), item.traceparent()), maxlen=EVENTS_MAXLEN,
                          approximate=True)
                if item.also is not None:
                    item.also(pipe)
        await pipe.execute()
