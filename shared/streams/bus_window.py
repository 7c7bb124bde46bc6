"""A third read shape beside `BatchReader`'s two (shared/streams/bus_subscriber.py): a sliding window.

`BatchReader` handles a read's entries side by side and reads again once the slowest of them is
done: a barrier. For costly entries that mostly wait (the runtime's wakes: lease, disk fence,
restore) the barrier was the queue: a burst of 100 wakes beside 100 streaming sessions reached
SessionLive p99 962 ms after its XADD while each wake's own read -> SessionLive was p99 119 ms
(docs/capacity.md "Per wake"). `WindowReader` keeps up to `window` entries in flight and reads
`read_size` more as soon as that many have finished, so a slow entry holds only its own slot.

The rules stay those of the batch shapes: entries with the same order key run one after another in
stream order (a key's lane); an entry is acked only after its handler returned (as each finishes,
one XACK for those finished meanwhile); one that raised stays pending for the `Claimer`, and the later
entries of its key read within `claim_idle_ms` are left pending behind it (the claimer takes them in
stream order); entries taken and not yet done
have their idle time reset so the claimer does not take them from a live reader. FastStream's
graceful stop waits for the entries in flight (each holds the subscriber's lock while it runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Hashable
from typing import Any

import structlog

from shared.redis.redis_wire import lenient_text
from shared.streams.bus_entries import BATCH_ENTRIES
from shared.streams.bus_subscriber import BatchReader, Route

log = structlog.get_logger()
_Entry = tuple[bytes, dict[Any, Any]]
STOP_POLL_S = 0.1  # how often a full window looks whether the subscriber was stopped


class WindowReader(BatchReader):
    """Up to `window` entries in flight; a read of up to `route.batch_size` each time that many are free."""

    def __init__(self, route: Route, window: int) -> None:
        super().__init__(route)
        self.window = max(window, route.batch_size)
        self.lanes: dict[Hashable, deque[_Entry]] = {}
        self.taken: set[bytes] = set()  # read and not done with: kept from the claimer
        self.freed = asyncio.Event()
        self.done: list[bytes] = []
        self.acking: asyncio.Task[None] | None = None
        self.keeper: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        # Keys whose entry failed here, until when: their next entries are left to the claimer too,
        # which retries them after the failed one (XAUTOCLAIM goes in stream order).
        self.blocked: dict[Hashable, float] = {}

    async def read_batch(self, raw: Any) -> None:
        """One call per read: the entries join their keys' lanes; returns once a next read fits."""
        r = self.route
        for entry_id_b, fields in zip(raw["message_ids"], raw[BATCH_ENTRIES], strict=True):
            key = await self.key_of(entry_id_b, fields)
            if key is None or self.held_back(key[0]):
                continue
            self.taken.add(entry_id_b)
            lane = self.lanes.get(key[0])
            if lane is not None:
                lane.append((entry_id_b, fields))  # its lane's task runs it after the ones before
                continue
            self.lanes[key[0]] = deque([(entry_id_b, fields)])
            self.spawn(self.run_lane(key[0]))
        if self.taken and (self.keeper is None or self.keeper.done()):
            self.keeper = self.spawn(self.keep_taken())
        while len(self.taken) > self.window - r.batch_size and self.subscriber.running:
            self.freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.freed.wait(), STOP_POLL_S)
        if r.pause is not None and self.subscriber.running:
            await r.pause()

    async def key_of(self, entry_id_b: bytes, fields: dict[Any, Any]) -> tuple[Hashable] | None:
        """The entry's order key (in a 1-tuple: a key may be None); None once an invalid entry is dead-lettered."""
        order_key = self.route.order_key
        if order_key is None:
            return (None,)  # one lane: the stream's order
        parsed = await self.validated(entry_id_b, fields)
        if parsed is None:
            self.ack(entry_id_b)
            return None
        return (order_key(parsed[0]),)

    def held_back(self, key: Hashable) -> bool:
        until = self.blocked.get(key)
        if until is not None and until < time.monotonic():
            del self.blocked[key]
            until = None
        return until is not None

    def spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def run_lane(self, key: Hashable) -> None:
        lane = self.lanes[key]
        lock = getattr(self.subscriber, "lock", None) or contextlib.nullcontext()
        try:
            with lock:  # FastStream's graceful stop waits for it
                while lane and self.subscriber.running:
                    entry_id_b, fields = lane[0]
                    if not await self.handle(lenient_text(entry_id_b), fields):
                        # a later entry of this key must not overtake the failed one
                        self.blocked[key] = time.monotonic() + self.route.claim_idle_ms / 1000
                        break
                    lane.popleft()
                    self.ack(entry_id_b)
                    self.release(entry_id_b)
        finally:
            # Whatever is left (a failure, a stop) stays pending for the claimer, in stream order.
            del self.lanes[key]
            for entry_id_b, _ in lane:
                self.release(entry_id_b)

    def release(self, entry_id_b: bytes) -> None:
        self.taken.discard(entry_id_b)
        self.freed.set()
        if not self.taken and self.keeper is not None:
            self.keeper.cancel()  # nothing left to keep (it also looks itself: a cancel can be swallowed)

    def ack(self, entry_id_b: bytes) -> None:
        """Ack as entries finish: one XACK at a time, for all that finished while the last was sent."""
        self.done.append(entry_id_b)
        if self.acking is None or self.acking.done():
            self.acking = self.spawn(self.flush_acks())

    async def flush_acks(self) -> None:
        r = self.route
        lock = getattr(self.subscriber, "lock", None) or contextlib.nullcontext()
        with lock:
            while self.done:
                ids, self.done = self.done, []
                try:
                    await r.client.xack(r.stream, r.group, *ids)
                except Exception:  # noqa: BLE001 - left pending: the claimer redelivers them
                    log.exception("ack_failed", stream=r.stream, group=r.group, entries=len(ids))

    async def keep_taken(self) -> None:
        """While entries are taken, reset their idle time every third of `claim_idle_ms` (as
        `BatchReader.keep_pending` does for a batch)."""
        r = self.route
        while self.taken:
            await asyncio.sleep(r.claim_idle_ms / 3000)
            if not self.taken:
                return
            try:
                await r.client.xclaim(r.stream, r.group, r.consumer, min_idle_time=0,
                                      message_ids=list(self.taken), justid=True)
            except Exception:  # noqa: BLE001 - a Redis hiccup: try again next time
                log.warning("keep_taken_failed", stream=r.stream, group=r.group, exc_info=True)
