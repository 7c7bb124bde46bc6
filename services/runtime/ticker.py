"""One send of streamed text per tick for all the sessions of a worker (docs/architecture.md "Streaming at scale").

Each Outbox already merges the text deltas of a short window into one event. Sent by each session on
its own, that is still one round trip per session per window: 500 streaming sessions at 40 windows a
second made 20,000 pipelines a second, each a write, a read and a wake-up of the event loop
(bench-stream). Here a worker's Outboxes with queued deltas wait for the next tick, and one pipeline
carries the events of all of them: Redis gets the same XADDs, the runtime one round trip per tick.

Ordering and fencing stay the Outbox's: a tick takes an Outbox only while no other send of that
session holds its send lock (it holds the lock until the pipeline has run, so an awaited event of
that session still follows its queued deltas), and checks each session's lease before taking its
batch. A lease check passes only with at least half a lease of validity left, far more than the
tick's round trip. A failed pipeline gives every session its batch back, in front.

The ticker is also the read gate of the sessions' model streams (engine/sse.py ReadGate): a stream
read waits for the gate, which opens just before each tick (`lead_s`). A token that arrived from the
model meanwhile waited in the socket instead of the Outbox's queue, for the same tick: no added
latency. What changes is the cost: one read, one parse loop and one wake-up per session per tick
(~2.4 tokens at 80 tokens/s and 30 ms) instead of one per token: a provider sends a token per chunk,
and every chunk read was a wake-up of the stream's task through the HTTP client's layers.

The window adapts to the load (`sends_per_s`): what a short window costs is events per second (Redis,
the proxy's fan-out and every SSE client pay per XADD), and what it buys is latency (a token waits
half a window on average). With few streaming sessions the worker ticks every `min_period_s`; with
more, the period grows so that one event per streaming session per tick stays within `sends_per_s`,
up to `period_s` (defaults: 10 ms up to 45 sessions, 30 ms from 135; bench-stream at 80 tokens/s:
added p99 at 100 sessions 50 -> 31-36 ms, and the full window where it keeps Redis at <= 0.5
commands per token).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
import structlog

from .lease import LeaseLost

if TYPE_CHECKING:
    from .events import Outbox, Queued

log = structlog.get_logger()


class DeltaTicker:
    def __init__(self, client: aioredis.Redis, period_s: float, lead_s: float = 0.002, *,
                 min_period_s: float | None = None, sends_per_s: float = 0.0) -> None:
        self.client = client
        self.period_s = period_s  # the window at load (and always, without `sends_per_s`)
        self.min_period_s = period_s if min_period_s is None else min(min_period_s, period_s)
        self.sends_per_s = sends_per_s  # the worker's budget of streamed-text events per second; 0: fixed
        self.lead_s = min(lead_s, self.min_period_s / 4)  # the gate opens this long before the tick collects
        self._waiting: dict[Outbox, None] = {}  # insertion-ordered set
        self._gate: asyncio.Future[None] | None = None  # the next opening of the read gate
        self._readers = 0  # streams waiting for the next opening of the gate
        self.streaming = 0  # sessions that read or sent streamed text at the last tick: the load
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0  # pipelines sent (tests, metrics)

    def period(self) -> float:
        """The next tick's window: one event per streaming session per tick within `sends_per_s`."""
        if self.sends_per_s <= 0:
            return self.period_s
        return min(self.period_s, max(self.min_period_s, self.streaming / self.sends_per_s))

    def want(self, outbox: Outbox) -> None:
        """`outbox` has queued deltas: send them with the next tick."""
        self._waiting[outbox] = None
        self._ensure_running()

    async def wait(self) -> None:
        """The read gate (ReadGate): returns when the gate opens next, just before a tick."""
        if self._gate is None:
            self._gate = asyncio.get_running_loop().create_future()
        gate = self._gate
        self._readers += 1
        self._ensure_running()
        await asyncio.shield(gate)  # one reader cancelled (an abort) does not close the gate for the rest

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    def _open_gate(self) -> int:
        """Opens the gate; returns how many streams waited for it."""
        gate, self._gate = self._gate, None
        readers, self._readers = self._readers, 0
        if gate is not None and not gate.done():
            gate.set_result(None)
        return readers

    async def _run(self) -> None:
        try:
            while self._waiting or self._gate is not None:
                await asyncio.sleep(self.period() - self.lead_s)
                readers = self._open_gate()  # the readers take what arrived, queue it, and the tick sends it
                await asyncio.sleep(self.lead_s)
                # A session counts whether its stream read text (gated) or only sent it (ungated). The
                # load is taken at once when it rises, let go slowly (half-life ~70 ticks) when it
                # falls: a worker whose streams end one after the other keeps its window meanwhile.
                self.streaming = max(readers, len(self._waiting), int(self.streaming * 0.99))
                await self._tick_due()
        finally:
            self._open_gate()  # never leave a reader waiting on a ticker that stopped

    async def _tick_due(self) -> None:
        if self._waiting:
            due, self._waiting = list(self._waiting), {}
            try:
                await self.tick(due)
            except Exception as exc:  # noqa: BLE001 - batches were given back; the next awaited event raises
                log.warning("progress_events_deferred", sessions=len(due), error=repr(exc))

    async def tick(self, due: list[Outbox]) -> None:
        taken: list[tuple[Outbox, list[Queued]]] = []
        sent = False
        try:
            for outbox in due:
                if outbox.sending.locked():
                    # Its own send is running (an awaited event drains the queue): it takes these too,
                    # or what is left waits for the next tick.
                    self._waiting[outbox] = None
                    continue
                await outbox.sending.acquire()
                taken.append((outbox, []))
                with contextlib.suppress(LeaseLost):  # kept queued: its next awaited event raises LeaseLost
                    taken[-1] = (outbox, await outbox.take_batch())
            pipe = self.client.pipeline(transaction=False)
            for outbox, batch in taken:
                outbox.add_commands(pipe, batch)
            if len(pipe):
                await pipe.execute()
                self.ticks += 1
            sent = True
        finally:
            for outbox, batch in taken:
                if not sent:
                    outbox.give_back(batch)  # in front: the session's next awaited event sends it (or raises)
                outbox.sending.release()
                if sent and outbox.has_queued():
                    self._waiting[outbox] = None  # queued meanwhile: the next tick
