"""SSE fan-out: one blocking XREAD per shard of watched sessions, shared by every client of the process.

A blocked `XREAD` per SSE client held one Redis connection each: at 540 streams the pool ran dry
("No connection available") and every other request queued behind it (GET /sessions/{id} 5.4 s).
Here each proxy process reads the events streams of the sessions that have subscribers, in shards of
up to SHARD_SIZE streams (as shared/inbox.py does for inboxes: Redis re-runs a blocked multi-stream
read over all its streams each time one gets an entry), each shard on one dedicated connection, and
hands every entry to the subscribers' bounded queues. A client that does not keep up is closed (its
EventSource resumes with Last-Event-ID), never buffered without bound.

A shard reads each stream from the id it last delivered, so an entry appended between two reads is
never skipped. When sessions join a shard its read in flight is cut short with CLIENT UNBLOCK, so a
new subscriber does not wait a whole block for the first live entry.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.connection import Connection

from shared import keys, redis_cluster
from shared.redis_wire import text
from shared.tracing import detached

log = structlog.get_logger()

SHARD_SIZE = 32
READ_COUNT = 200  # entries per stream per read
# (entry id, event JSON, the traceparent of the run that made it); None: the subscription was closed
Item = tuple[str, str, str | None] | None


@dataclass(eq=False)
class Subscriber:
    sid: str
    user: str
    queue: asyncio.Queue[Item]
    closed: str | None = None  # why the fan-out stopped feeding it
    released: bool = False  # no longer counted for its user

    def offer(self, item: tuple[str, str, str | None]) -> None:
        if self.closed is not None:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.close("slow_client")

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
    last_id: str  # the newest entry handed out (or the stream's tail when the topic was created)
    subscribers: set[Subscriber] = field(default_factory=set)


@dataclass(eq=False)
class _Shard:
    sids: set[str] = field(default_factory=set)
    # On a Redis Cluster one XREAD names streams of one slot only: the slot of every stream it reads
    # (None on a single Redis, where any sessions share a shard).
    slot: int | None = None
    task: asyncio.Task[None] | None = None
    client_id: int | None = None  # its connection's, for CLIENT UNBLOCK
    blocked: bool = False
    changed: bool = False  # sessions joined after the read in flight was built
    streams: tuple[list[str], list[str]] | None = None  # (sids, their stream names) of the next read


class EventFanout:
    """`subscribe` / `unsubscribe` per SSE client; the shards' reads run as tasks of their own."""

    def __init__(self, blocking: aioredis.Redis, control: aioredis.Redis, *, block_ms: int,
                 queue_size: int, shard_size: int = SHARD_SIZE) -> None:
        self._blocking = blocking  # its read timeout covers block_ms (shared.reconnect.connect_blocking)
        self._control = control
        self._block_ms = block_ms
        self._queue_size = queue_size
        self._shard_size = shard_size
        self._topics: dict[str, _Topic] = {}
        self._shards: list[_Shard] = []
        self._per_user: Counter[str] = Counter()
        self._closing = False

    def streams_of(self, user: str) -> int:
        return self._per_user[user]

    @property
    def shard_count(self) -> int:
        return len(self._shards)

    async def subscribe(self, sid: str, user: str) -> Subscriber:
        """Entries of `sid` appended from now on (and possibly a few before: callers drop what they
        already sent) arrive on the subscriber's queue."""
        sub = Subscriber(sid=sid, user=user, queue=asyncio.Queue(self._queue_size))
        self._per_user[user] += 1
        try:
            topic = self._topics.get(sid)
            if topic is None:
                newest = await self._control.xrevrange(keys.events(sid), count=1)
                topic = self._topics.get(sid)  # another subscriber may have created it meanwhile
                if topic is None:
                    topic = _Topic(sid=sid, last_id=text(newest[0][0]) if newest else "0-0")
                    self._topics[sid] = topic
                    topic.subscribers.add(sub)
                    await self._place(sid)
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
                for shard in self._shards:
                    if sub.sid in shard.sids:
                        shard.sids.discard(sub.sid)
                        shard.streams = None
        self._release(sub)

    def _release(self, sub: Subscriber) -> None:
        if sub.released:
            return
        sub.released = True
        self._per_user[sub.user] -= 1
        if self._per_user[sub.user] <= 0:
            del self._per_user[sub.user]

    async def _place(self, sid: str) -> None:
        slot = redis_cluster.slot_group(self._blocking, keys.events(sid))
        shard = next((s for s in self._shards if len(s.sids) < self._shard_size and s.slot == slot), None)
        if shard is None:
            shard = _Shard(slot=slot)
            self._shards.append(shard)
        shard.sids.add(sid)
        shard.streams = None
        shard.changed = True
        if shard.task is None or shard.task.done():
            with detached():  # shared by every subscriber: not part of the first one's request trace
                shard.task = asyncio.ensure_future(self._run(shard))
        elif shard.blocked:
            await self._unblock(shard)

    async def _unblock(self, shard: _Shard) -> None:
        if shard.client_id is not None and shard.sids:
            with contextlib.suppress(Exception):  # the read ends within its block anyway
                # To the node the read blocks on (a client id is one node's).
                await redis_cluster.node_command(self._control, keys.events(next(iter(shard.sids))),
                                                 "CLIENT", "UNBLOCK", shard.client_id)

    async def close(self) -> None:
        self._closing = True
        tasks = [s.task for s in self._shards if s.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for topic in self._topics.values():
            for sub in topic.subscribers:
                sub.close("shutdown")

    async def _run(self, shard: _Shard) -> None:
        """One shard's reads, on a connection of its own, until it has no sessions left."""
        delay = 0.1
        while shard.sids and not self._closing:
            route = keys.events(next(iter(shard.sids)))  # the shard's slot (any stream of it)
            try:
                async with redis_cluster.node_connection(self._blocking, route) as conn:
                    try:
                        await conn.send_command("CLIENT", "ID")
                        shard.client_id = int(await conn.read_response())
                        while shard.sids and not self._closing:
                            await self._read_once(shard, conn)
                            delay = 0.1
                    except BaseException:
                        await conn.disconnect()  # a reply may still be on its way: the connection is spent
                        raise
                    finally:
                        shard.blocked = False
                        shard.client_id = None
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis trouble: a fresh connection after a pause
                log.exception("sse_fanout_read_failed", sessions=len(shard.sids))
                await redis_cluster.refresh_route(self._control, route)  # a failover moved the slot
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        if shard in self._shards and not shard.sids:
            self._shards.remove(shard)

    async def _read_once(self, shard: _Shard, conn: Connection) -> None:
        shard.changed = False
        if shard.streams is None:
            # The names are built when the shard's sessions change, not per read (a read per tick).
            sids = sorted(shard.sids)
            shard.streams = (sids, [keys.events(sid) for sid in sids])
        sids, streams = shard.streams
        ids = [self._topics[sid].last_id for sid in sids]
        await conn.send_command("XREAD", "COUNT", READ_COUNT, "BLOCK", self._block_ms, "STREAMS", *streams, *ids)
        shard.blocked = True
        if shard.changed:  # sessions joined while the command went out: do not make them wait a block
            await self._unblock(shard)
        try:
            reply: Any = await conn.read_response()
        finally:
            shard.blocked = False
        self._deliver(reply, dict(zip(streams, sids, strict=True)))

    def _deliver(self, reply: Any, sid_of: dict[str, str]) -> None:
        for stream, entries in reply.items() if isinstance(reply, dict) else reply or []:  # RESP3: a map
            topic = self._topics.get(sid_of.get(text(stream), ""))
            if topic is None:
                continue  # nobody is watching it any more
            for entry_id, flat in entries:
                fields = dict(zip(flat[::2], flat[1::2], strict=True)) if isinstance(flat, list) else flat or {}
                topic.last_id = text(entry_id)
                data = fields.get(b"data", fields.get("data"))
                if data is None:
                    continue
                parent = fields.get(b"traceparent", fields.get("traceparent"))
                item = (topic.last_id, text(data), text(parent) if parent is not None else None)
                for sub in list(topic.subscribers):
                    sub.offer(item)
