"""SSE fan-out: the events streams of the sessions with subscribers, read once per proxy process and
shared by every client of it.

A blocked `XREAD` per SSE client held one Redis connection each: at 540 streams the pool ran dry
("No connection available") and every other request queued behind it (GET /sessions/{id} 5.4 s).
Here each proxy process reads the events streams of the sessions that have subscribers through the
shared StreamReader (shared/streams/stream_reader.py, without a consumer group: sharded blocking XREADs, each
stream from the id it last delivered), and hands every entry to the subscribers' bounded queues. A
client that does not keep up is closed (its EventSource resumes with Last-Event-ID), never buffered
without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import redis.asyncio as aioredis
import structlog

from shared.redis import keys
from shared.redis.redis_wire import text
from shared.streams.stream_reader import StreamEntry, StreamReader
from shared.telemetry.tracing import detached

log = structlog.get_logger()

READ_COUNT = 200  # entries per stream per read
# (entry id, event JSON, the traceparent of the run that made it); None: the subscription was closed
Item = tuple[str, str, str | None] | None
# Offered to a subscriber fed nothing for a heartbeat interval (compared by identity). One task of
# the fan-out keeps the time for every client: a timer per wait for an event of each client cost a
# timer handle, scheduled and cancelled, per event per client (bench-stream).
HEARTBEAT: tuple[str, str, str | None] = ("", ": heartbeat", None)


class Mailbox:
    """A bounded queue with one reader (the client's SSE task), and asyncio.Queue's calls the stream
    uses. asyncio.Queue is Python too: its put wakes a list of getters, keeps the unfinished-task
    count and a `join` event, and each `get` builds a future in a loop; ~10 calls per event and
    client that a queue with one reader has no use for."""

    __slots__ = ("_items", "_maxsize", "_waiter")

    def __init__(self, maxsize: int) -> None:
        self._items: deque[Item] = deque()
        self._maxsize = maxsize if maxsize > 0 else 2**62  # as asyncio.Queue: 0 is no bound
        self._waiter: asyncio.Future[None] | None = None  # the reader's, while it waits

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return len(self._items) >= self._maxsize

    def put_nowait(self, item: Item) -> None:
        if len(self._items) >= self._maxsize:
            raise asyncio.QueueFull
        self._items.append(item)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():  # done: the reader was cancelled
            waiter.set_result(None)

    def get_nowait(self) -> Item:
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    def wait(self) -> asyncio.Future[None]:
        """Done once an item is in (at once when one is): a future, awaited without a coroutine frame
        of its own to resume per event."""
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        if self._items:
            waiter.set_result(None)
        return waiter

    async def get(self) -> Item:
        while not self._items:
            await self.wait()
        return self._items.popleft()


@dataclass(eq=False)
class Subscriber:
    sid: str
    user: str
    queue: Mailbox
    closed: str | None = None  # why the fan-out stopped feeding it
    released: bool = False  # no longer counted for its user
    fed_at: float = field(default_factory=time.monotonic)  # when it was last offered anything

    def offer(self, item: tuple[str, str, str | None]) -> None:
        if self.closed is not None:
            return
        self.fed_at = time.monotonic()
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.close("slow_client")

    def beat(self, now: float, interval_s: float) -> None:
        """A heartbeat when nothing was offered for `interval_s` (none for a full queue: it is fed)."""
        if self.closed is None and now - self.fed_at >= interval_s and not self.queue.full():
            self.fed_at = now
            self.queue.put_nowait(HEARTBEAT)

    def close(self, reason: str) -> None:
        if self.closed is not None:
            return
        self.closed = reason
        while not self.queue.empty():  # what it did not take is dropped: it resumes by Last-Event-ID
            self.queue.get_nowait()
        self.queue.put_nowait(None)


@dataclass(eq=False)
class _Topic:
    sid: str
    subscribers: set[Subscriber] = field(default_factory=set)


class EventFanout:
    """`subscribe` / `unsubscribe` per SSE client; the shards' reads run as tasks of their own."""

    def __init__(self, blocking: aioredis.Redis, control: aioredis.Redis, *, block_ms: int,
                 queue_size: int, heartbeat_s: float | None = None) -> None:
        # `blocking`: its read timeout covers block_ms (shared.redis.reconnect.connect_blocking).
        self._reader = StreamReader(blocking, keys.events, control=control)
        self._control = control
        self._block_ms = block_ms
        self._queue_size = queue_size
        self._topics: dict[str, _Topic] = {}
        self._per_user: Counter[str] = Counter()
        self._heartbeat_s = block_ms / 1000 if heartbeat_s is None else heartbeat_s
        self._task: asyncio.Task[None] | None = None
        self._beats: asyncio.Task[None] | None = None
        self._closing = False

    def streams_of(self, user: str) -> int:
        return self._per_user[user]

    @property
    def shard_count(self) -> int:
        return self._reader.shard_count

    async def subscribe(self, sid: str, user: str) -> Subscriber:
        """Entries of `sid` appended from now on (and possibly a few before: callers drop what they
        already sent) arrive on the subscriber's queue."""
        sub = Subscriber(sid=sid, user=user, queue=Mailbox(self._queue_size))
        self._per_user[user] += 1
        try:
            topic = self._topics.get(sid)
            if topic is None:
                newest = await self._control.xrevrange(keys.events(sid), count=1)
                topic = self._topics.get(sid)  # another subscriber may have created it meanwhile
                if topic is None:
                    topic = _Topic(sid=sid)
                    self._topics[sid] = topic
                    topic.subscribers.add(sub)
                    await self._reader.add(sid, text(newest[0][0]) if newest else "0-0")
                    with detached():  # shared by every subscriber: not part of the first one's request trace
                        if self._task is None or self._task.done():
                            self._task = asyncio.ensure_future(self._run())
                        if self._beats is None or self._beats.done():
                            self._beats = asyncio.ensure_future(self._beat())
            topic.subscribers.add(sub)
        except BaseException:  # cancelled or Redis failed: nothing stays registered for it
            self.unsubscribe(sub)
            raise
        return sub

    def close_session(self, sid: str, reason: str) -> None:
        """End every stream of `sid` on this proxy (the session was deleted)."""
        topic = self._topics.get(sid)
        for sub in list(topic.subscribers) if topic is not None else []:
            sub.close(reason)

    def unsubscribe(self, sub: Subscriber) -> None:
        topic = self._topics.get(sub.sid)
        if topic is not None and sub in topic.subscribers:
            topic.subscribers.discard(sub)
            if not topic.subscribers:  # its shard stops reading it with its next read
                del self._topics[sub.sid]
                self._reader.remove(sub.sid)
        self._release(sub)

    def _release(self, sub: Subscriber) -> None:
        if sub.released:
            return
        sub.released = True
        self._per_user[sub.user] -= 1
        if self._per_user[sub.user] <= 0:
            del self._per_user[sub.user]

    async def close(self) -> None:
        self._closing = True
        for task in (self._task, self._beats):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        await self._reader.close()
        for topic in self._topics.values():
            for sub in topic.subscribers:
                sub.close("shutdown")

    async def _run(self) -> None:
        """The reads, until no session has subscribers; after a failure, a pause (the reader has
        already reported it and refreshed the route)."""
        delay = 0.1
        while self._topics and not self._closing:
            try:
                entries = await self._reader.read(self._block_ms, READ_COUNT)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis trouble: the next read after a pause
                log.exception("sse_fanout_read_failed", sessions=len(self._topics))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.1
            self._deliver(entries)

    async def _beat(self) -> None:
        """Heartbeats, checked four times an interval: each client gets one after an interval (up to
        a quarter more) without anything else."""
        while self._topics and not self._closing:
            await asyncio.sleep(self._heartbeat_s / 4)
            now = time.monotonic()
            for topic in list(self._topics.values()):
                for sub in topic.subscribers:
                    sub.beat(now, self._heartbeat_s)

    def _deliver(self, entries: list[StreamEntry]) -> None:
        for entry in entries:
            topic = self._topics.get(entry.name)
            data = entry.fields.get(b"data", entry.fields.get("data"))
            if topic is None or data is None:
                continue  # nobody is watching it any more, or not an event
            parent = entry.fields.get(b"traceparent", entry.fields.get("traceparent"))
            item = (entry.entry_id, text(data), text(parent) if parent is not None else None)
            for sub in list(topic.subscribers):
                sub.offer(item)
