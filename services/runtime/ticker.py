"""One send of streamed text per tick for all the sessions of a worker (issue 20).

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
    def __init__(self, client: aioredis.Redis, period_s: float) -> None:
        self.client = client
        self.period_s = period_s
        self._waiting: dict[Outbox, None] = {}  # insertion-ordered set
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0  # pipelines sent (tests, metrics)

    def want(self, outbox: Outbox) -> None:
        """`outbox` has queued deltas: send them with the next tick."""
        self._waiting[outbox] = None
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._waiting:
            await asyncio.sleep(self.period_s)
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
