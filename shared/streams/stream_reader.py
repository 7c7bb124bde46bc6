"""One reader for many Redis streams of dynamic names (per-session streams): the runtime reads its
sessions' inboxes with it inside a consumer group, the proxy's SSE fan-out the events streams of the
sessions with subscribers without one. The service streams keep their FastStream subscribers.

Sharded: one blocking `XREADGROUP` / `XREAD` per shard of up to SHARD_SIZE streams, each shard on a
connection of its own, all in flight at once; `read` returns what the first shard(s) to answer read.
Redis runs a blocked multi-stream read again, over all its streams, each time one of them gets an
entry: ~0.7 ms of Redis's single thread with 200 streams (every client waits), ~0.2 ms with 32
(bench-inject). On a Redis Cluster one read names streams of one slot only, so a shard holds one
slot's streams; with rings (shared/streams/inbox_rings.py, the inbox on a cluster) a sharded Pub/Sub doorbell
says which streams to read, read without blocking and batched per node instead (one connection per
node, not one per slot; bench/cluster_inbox.py).

Without a group each stream is read from the id last handed out (`add` gives the first), so an entry
appended between two reads is never skipped. A stream that joins a shard cuts the shard's read in
flight short (CLIENT UNBLOCK), so it does not wait a whole block for its first entry.
In a group, after a failed read (a shard's, or a node's batch with rings) the next read of those
streams first hands out the consumer's own pending entries its lost reply held (shared/streams/stream_handed.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.connection import Connection
from redis.exceptions import AskError, RedisError, ResponseError

from shared.redis import redis_cluster
from shared.redis.redis_wire import text
from shared.streams.bus import ensure_group
from shared.streams.inbox_rings import NodeRings
from shared.streams.stream_handed import HandedOut
from shared.streams.stream_packing import PackedRead, ReadGroup, own_pending_command, pack_read, read_command

log = structlog.get_logger()

SHARD_SIZE = 32  # streams per blocking read (see the module's docstring)
RING_READ_CHUNK = 500  # streams per pipeline of non-blocking reads on a cluster (a sweep reads them all)
Fields = dict[Any, Any]


@dataclass(slots=True)
class StreamEntry:
    name: str  # what the stream was added as (a session id)
    entry_id: str
    fields: Fields


@dataclass(eq=False)
class _Shard:
    names: set[str] = field(default_factory=set)
    slot: int | None = None  # on a cluster: the slot of every stream it reads (None on a single Redis)
    packed: PackedRead | None = None  # the read's command, made again when the streams change
    want: tuple[int, int] | None = None  # (count, block_ms) of the read asked for and not started
    result: list[StreamEntry] | BaseException | None = None  # answered, not collected yet
    task: asyncio.Task[None] | None = None  # its connection's reads
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    client_id: int | None = None  # its connection's, for CLIENT UNBLOCK
    blocked: bool = False
    changed: bool = False  # streams joined after the read in flight was sent
    recover: bool = False  # in a group: a read failed, its reply may be lost (the module's docstring)


class StreamReader:
    def __init__(self, client: aioredis.Redis, stream_of: Callable[[str], str], *, group: ReadGroup | None = None,
                 rings: NodeRings | None = None, control: aioredis.Redis | None = None,
                 shard_size: int = SHARD_SIZE) -> None:
        self._client = client  # the blocking reads' (its read timeout covers their block)
        self._control = control or client  # CLIENT UNBLOCK, route refreshes
        self._stream_of = stream_of
        self._group = group
        self.rings = rings
        self._shard_size = shard_size
        self._shards: list[_Shard] = []
        self._handed = HandedOut(grouped=group is not None)
        self._recovering: set[str] = set()  # with rings: names whose last read failed
        self._ready = asyncio.Event()  # a shard has a result to collect
        self._ring_read: asyncio.Future[list[StreamEntry]] | None = None
        self._closing = False
        self._waiting = False  # a `read` waits for `_ready`

    @property
    def names(self) -> frozenset[str]:
        if self.rings is not None:
            return self.rings.sessions
        return frozenset().union(*(shard.names for shard in self._shards))

    @property
    def shard_count(self) -> int:
        return len(self._shards)

    async def add(self, name: str, from_id: str = "0-0") -> None:
        """Read `name`'s stream from now on: in a group, what the group has not delivered (`from_id`:
        the last entry already handed out, e.g. claimed); without one, the entries after `from_id`."""
        self._handed.start(name, from_id)
        if self.rings is not None:
            self.rings.add(name)
            return
        if any(name in shard.names for shard in self._shards):
            return
        slot = redis_cluster.slot_group(self._client, self._stream_of(name))
        shard = next((s for s in self._shards if len(s.names) < self._shard_size and s.slot == slot), None)
        if shard is None:
            shard = _Shard(slot=slot)
            self._shards.append(shard)
        shard.names.add(name)
        shard.packed, shard.changed = None, True
        if self._waiting and (shard.task is None or shard.task.done()):
            # A `read` waiting on the other shards (or on one that was just emptied) would never start
            # this shard's reads: it returns, and the caller's next `read` starts them.
            self._ready.set()
        if shard.blocked and shard.client_id is not None:
            with contextlib.suppress(Exception):  # the read ends within its block anyway
                # To the node the read blocks on (a client id is one node's).
                await redis_cluster.node_command(self._control, self._stream_of(name), "CLIENT", "UNBLOCK",
                                                 shard.client_id)

    def claimed(self, name: str, entry_ids: list[str]) -> None:
        """In a group: entries of `name` claimed from another consumer, not to be handed out again."""
        self._handed.claimed(name, entry_ids)

    def remove(self, name: str) -> None:
        """Its stream is no longer read from the next read on (a read in flight may still bring it)."""
        self._handed.forget(name)
        self._recovering.discard(name)
        if self.rings is not None:
            self.rings.remove(name)
        for shard in self._shards:
            if name in shard.names:
                shard.names.discard(name)
                shard.packed = None
                if not shard.names:
                    shard.asked.set()  # its reads end
                    if self._waiting:  # without a result of its own: a `read` waiting on it returns
                        self._ready.set()

    async def close(self) -> None:
        """Cancel the reads in flight (each spends its connection)."""
        self._closing = True
        tasks: list[asyncio.Future[Any]] = [shard.task for shard in self._shards if shard.task is not None]
        if self._ring_read is not None:
            tasks.append(self._ring_read)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for shard in self._shards:
            shard.task = None
        self._ring_read = None
        if self.rings is not None:
            await self.rings.close()
        self._closing = False

    async def read(self, block_ms: int, count: int) -> list[StreamEntry]:
        """Entries from the first shard(s) to answer. The other shards' reads stay in flight for the
        next call; a call cancelled while waiting loses nothing (the next one collects them). With
        rings: the streams rung (or swept), read without blocking. A failure is raised only when
        nothing was read (the caller backs off)."""
        if self.rings is not None:
            # Shielded: a read cancelled mid-way stays in flight, and the next call collects what it read.
            if self._ring_read is None:
                self._ring_read = asyncio.ensure_future(self._read_rings(block_ms, count))
            try:
                return await asyncio.shield(self._ring_read)
            finally:
                if self._ring_read.done():
                    self._ring_read = None
        self._shards = [s for s in self._shards if s.names or s.result is not None]
        for shard in self._shards:
            if shard.names and shard.result is None and not shard.asked.is_set() and not shard.blocked:
                shard.want = (count, block_ms)
                shard.asked.set()
            if shard.names and (shard.task is None or shard.task.done()):
                shard.task = asyncio.ensure_future(self._run(shard))
        if not self._shards:
            return []
        self._waiting = True
        try:
            await self._ready.wait()
        finally:
            self._waiting = False
        self._ready.clear()
        out: list[StreamEntry] = []
        failure: BaseException | None = None
        for shard in self._shards:
            result, shard.result = shard.result, None
            if isinstance(result, BaseException):
                failure = failure or result
            elif result is not None:
                out.extend(result)
        if failure is not None and not out:
            raise failure
        return out

    # ------------------------------------------------------------ sharded blocking reads

    async def _run(self, shard: _Shard) -> None:
        """A shard's reads, on a connection of its own, one per `read` call that asked for one."""
        delay = 0.0
        while shard.names and not self._closing:
            route = self._stream_of(next(iter(shard.names)))  # the shard's slot (any stream of it)
            try:
                await asyncio.sleep(delay)
                async with redis_cluster.node_connection(self._client, route) as conn:
                    try:
                        await conn.send_command("CLIENT", "ID")
                        shard.client_id = int(await conn.read_response())
                        while shard.names and not self._closing:
                            await shard.asked.wait()
                            if shard.want is None or not shard.names:
                                shard.asked.clear()
                                continue
                            entries = await self._read_shard(shard, conn, *shard.want)
                            shard.want, shard.result = None, entries
                            shard.asked.clear()
                            self._ready.set()
                            delay = 0.0
                    except BaseException:
                        await conn.disconnect()  # a reply may still be on its way: the connection is spent
                        raise
                    finally:
                        shard.blocked, shard.client_id = False, None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis trouble: reported, then a fresh connection
                log.warning("stream_read_failed", streams=len(shard.names), error=repr(exc)[:300])
                shard.want, shard.result = None, exc
                shard.recover = self._group is not None
                shard.asked.clear()
                self._ready.set()
                if not isinstance(exc, ResponseError) or isinstance(exc, AskError):
                    await redis_cluster.refresh_route(self._control, route)  # a failover moved the slot
                delay = min(max(delay * 2, 0.1), 2.0)

    async def _read_shard(self, shard: _Shard, conn: Connection, count: int, block_ms: int) -> list[StreamEntry]:
        if shard.recover:
            recovered = await self._read_own_pending(shard, conn, self._packed(shard, count, block_ms))
            if recovered:
                return recovered
        while True:
            shard.changed = False
            packed = self._packed(shard, count, block_ms)
            try:
                await conn.send_packed_command(read_command(packed, self._group, self._handed.last))
                shard.blocked = True
                if shard.changed:  # streams joined while the command went out: do not make them wait
                    shard.blocked = False
                    await redis_cluster.node_command(self._control, packed.streams[0], "CLIENT", "UNBLOCK",
                                                     shard.client_id)
                try:
                    reply: Any = await conn.read_response()
                finally:
                    shard.blocked = False
            except ResponseError as exc:
                if self._group is None or "NOGROUP" not in str(exc):
                    raise
                await self._recreate_groups(packed.streams, exc)
                continue
            entries = self._entries(reply, packed.name_of)
            if entries or not shard.changed:
                return entries  # an empty read cut short for a joining stream is read again at once

    async def _read_own_pending(self, shard: _Shard, conn: Connection, packed: PackedRead) -> list[StreamEntry]:
        """The consumer's own pending entries above those handed out (the module's docstring); it stays
        on while a stream fills the read's COUNT (more may be pending)."""
        assert self._group is not None
        count = packed.key[0]
        after = [self._handed.after(name) for name in packed.names]
        await conn.send_command(*own_pending_command(self._group, packed.streams, after, count))
        try:
            reply: Any = await conn.read_response()
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self._recreate_groups(packed.streams, exc)  # a group made anew has nothing pending
            reply = None
        filled: dict[str, int] = {}
        entries = self._entries(reply, packed.name_of, filled)
        shard.recover = any(n >= count for n in filled.values())
        if entries:
            log.info("stream_pending_reread", entries=len(entries), streams=len(filled))
        return entries

    async def _recreate_groups(self, streams: list[str], exc: ResponseError) -> None:
        """One stream (or its group) vanished: the read fails for every stream of the call. Recreate
        what is missing (idempotent) so the other streams keep being served."""
        assert self._group is not None
        log.warning("stream_group_recreated", error=str(exc)[:300])
        for stream in streams:
            await ensure_group(self._client, stream, self._group.name, track=False)

    def _packed(self, shard: _Shard, count: int, block_ms: int) -> PackedRead:
        if shard.packed is None or shard.packed.key != (count, block_ms):
            names = sorted(shard.names)
            shard.packed = pack_read(self._group, names, [self._stream_of(n) for n in names], count, block_ms)
        return shard.packed

    def _entries(self, reply: Any, name_of: dict[str, str], counted: dict[str, int] | None = None) -> list[StreamEntry]:
        """The entries of an XREAD(GROUP) reply (a list of [stream, entries]; a map under RESP3);
        `counted`: how many each stream's reply held."""
        out: list[StreamEntry] = []
        for stream, entries in reply.items() if isinstance(reply, dict) else reply or []:
            name = name_of.get(text(stream))
            if name is None:
                continue
            if counted is not None:
                counted[name] = len(entries)
            for entry_id, flat in entries:
                eid = text(entry_id)
                if not self._handed.take(name, eid) or flat is None:
                    continue  # not to hand out, or deleted while pending (own pending entries only)
                fields = dict(zip(flat[::2], flat[1::2], strict=True)) if isinstance(flat, list) else flat or {}
                out.append(StreamEntry(name, eid, fields))
        return out

    # ------------------------------------------------------------ rings (a cluster)

    async def _read_rings(self, block_ms: int, count: int) -> list[StreamEntry]:
        """The rung (or swept) streams, read without blocking: per node, one connection and one write
        of all their reads (redis-py's cluster pipeline costs ~4x the CPU in Python). A stream whose
        read failed or filled `count` is rung again, so it does not wait for the next sweep."""
        assert self.rings is not None
        names = await self.rings.due(block_ms)
        groups: dict[str, list[str]] = {}
        for name in sorted(names):
            groups.setdefault(redis_cluster.node_name(self._client, self._stream_of(name)), []).append(name)
        batches = [group[i : i + RING_READ_CHUNK] for group in groups.values()
                   for i in range(0, len(group), RING_READ_CHUNK)]
        results = await asyncio.gather(*(self._read_node(batch, count) for batch in batches), return_exceptions=True)
        out: list[StreamEntry] = []
        failure: BaseException | None = None
        for result in results:
            if isinstance(result, BaseException):
                failure = failure or result
            else:
                out.extend(result)
        if failure is not None and not out:
            raise failure
        return out

    def _ring_command(self, name: str, count: int) -> tuple[Any, ...]:
        stream = self._stream_of(name)
        if self._group is None:
            return ("XREAD", "COUNT", count, "STREAMS", stream, self._handed.after(name))
        after = self._handed.after(name) if name in self._recovering else ">"  # after a failed read
        return ("XREADGROUP", "GROUP", self._group.name, self._group.consumer, "COUNT", count, "STREAMS", stream, after)

    async def _read_node(self, names: list[str], count: int) -> list[StreamEntry]:
        assert self.rings is not None
        route = self._stream_of(names[0])
        replies: list[Any] = []
        try:
            async with redis_cluster.node_connection(self._client, route) as conn:
                try:
                    await conn.send_packed_command(conn.pack_commands([self._ring_command(n, count) for n in names]))
                    for _ in names:
                        try:
                            replies.append(await conn.read_response())
                        except ResponseError as exc:  # one stream's error: the other replies follow
                            replies.append(exc)
                except BaseException:
                    await conn.disconnect()  # replies may still be on their way: the connection is spent
                    raise
        except (RedisError, OSError):
            if self._group is not None:
                self._recovering.update(n for n in names if n in self._handed.last)  # replies may be lost
            for name in names:
                self.rings.ring_later(name)
            self.rings.refresh(route)  # a failover moved the slots
            raise
        out: list[StreamEntry] = []
        for name, reply in zip(names, replies, strict=True):
            if isinstance(reply, ResponseError):
                if self._group is not None and "NOGROUP" in str(reply):  # the stream (or its group) vanished
                    await ensure_group(self._client, self._stream_of(name), self._group.name, track=False)
                    self.rings.ring(name)
                else:  # MOVED: the slot left this node
                    log.warning("stream_read_failed", name=name, error=str(reply)[:300])
                    self.rings.refresh(self._stream_of(name))
                    self.rings.ring_later(name)
                continue
            counted: dict[str, int] = {}
            entries = self._entries(reply, {self._stream_of(name): name}, counted)
            if name in self._recovering and counted.get(name, 0) < count:
                self._recovering.discard(name)  # every own pending entry read: `>` next, at once
                self.rings.ring(name)
            elif counted.get(name, 0) >= count:
                self.rings.ring(name)
            out.extend(entries)
        return out

