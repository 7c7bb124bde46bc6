"""The per-session inbox `gamma:{sid}:inbox`: plain XADD {type, data} and one multiplexed reader.

Sessions are dynamic, so the runtime does not use FastStream here. On a single Redis: one blocking
`XREADGROUP` per shard of up to 32 of the sessions it leases (group `runtime`), all in flight at once.
On a Redis Cluster a blocking read names one slot only, so there every append also rings a doorbell
(sharded Pub/Sub, `shared/inbox_rings.py`) and the worker reads the rung inboxes without blocking,
batched per node: one connection per node instead of one per live session (bench/cluster_inbox.py).
A new lease holder first claims the previous holder's pending entries so nothing the dead worker read
but did not ack is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import ValidationError
from redis.exceptions import AskError, ConnectionError, RedisError, ResponseError, TimeoutError

from . import keys, redis_cluster, topology, tracing
from .bus import dead_letter, ensure_group
from .contracts.inbox import INBOX_ADAPTER, InboxMessage
from .inbox_rings import SWEEP_INTERVAL_S, NodeRings
from .redis_wire import text

GROUP = topology.group_of(topology.INBOX_READER)
log = structlog.get_logger()


def traced(message: InboxMessage) -> InboxMessage:
    """`message` with the producer's trace (the current span's `traceparent`), unless it names one:
    the runtime handles the entry in that trace (one trace per prompt, docs/architecture.md
    "Observability"). Only when tracing is on: off, the ids would lead nowhere and cost ~20 us."""
    if message.traceparent is not None or not tracing.on():
        return message
    parent = tracing.traceparent()
    return message if parent is None else message.model_copy(update={"traceparent": parent})


def entry_fields(message: InboxMessage) -> dict[str, str]:
    """The stream fields `append` writes (for a producer that XADDs inside a Lua script)."""
    return {"type": message.type, "data": traced(message).model_dump_json(by_alias=True)}


# After an XADD to KEYS[1] inside a script: ring the reader when ARGV[n] names a channel (`ring_arg`).
def ring_lua(argv: int) -> str:
    return f"if ARGV[{argv}] ~= '' then redis.call('SPUBLISH', ARGV[{argv}], '1') end"


def ring_arg(client: aioredis.Redis, sid: str) -> str:
    """The ring channel a script that appends to `sid`'s inbox publishes on: on a cluster only (a
    single Redis keeps its blocking reads, and nobody would listen)."""
    return keys.inbox_ring(sid) if redis_cluster.cluster_of(client) is not None else ""


async def append(client: aioredis.Redis, message: InboxMessage, *, ring: bool | None = None) -> str:
    """Producers (proxy, notifications, digest, runtime subagents) call this; returns the entry id.
    Every other writer of an inbox is a script that ends with `ring_lua` (compaction, notifications
    intake). `ring` overrides the cluster default (bench/cluster_inbox.py measures without)."""
    stream = keys.inbox(message.session_id)
    channel = ring_arg(client, message.session_id) if ring is None else keys.inbox_ring(message.session_id) * ring
    data = traced(message).model_dump_json(by_alias=True)
    # The append is acknowledged to a client (202): on a cluster, on a replica first (redis_cluster.durable).
    # The ring follows the XADD on the same connection (no script, no MULTI: cheaper for Redis); a
    # writer that dies in between leaves the entry to the reader's sweep.
    ring_cmd = [("SPUBLISH", channel, "1")] if channel else []
    entry_id = await redis_cluster.durable(client, stream, "XADD", stream, "*", "type", message.type, "data", data,
                                           then=ring_cmd)
    return text(entry_id)


@dataclass(frozen=True)
class InboxEntry:
    session_id: str
    entry_id: str
    message: InboxMessage
    read_at: float = 0.0  # wall clock when this worker read it (the entry id carries Redis's append time)


def parse_fields(fields: dict[bytes | str, bytes | str]) -> InboxMessage:
    data = fields.get(b"data", fields.get("data"))
    if data is None:
        raise ValueError("inbox entry has no data field")
    return INBOX_ADAPTER.validate_json(data)


# Sessions per blocking XREADGROUP. Redis runs a blocked XREADGROUP again, over all its streams, each
# time one of them gets an entry: ~0.7 ms of Redis's single thread with 200 streams (every client
# waits), ~0.2 ms with 32 (bench-inject). Each shard is one blocked call on its own connection.
SHARD_SIZE = 32


@dataclass
class _Shard:
    sessions: set[str] = field(default_factory=set)
    # On a Redis Cluster one XREADGROUP names streams of one slot only: the slot of its inboxes
    # (None on a single Redis, where any sessions share a shard).
    slot: int | None = None
    packed: tuple[tuple[int, int], list[Any]] | None = None  # ((count, block_ms), RESP bytes)
    task: asyncio.Task[list[InboxEntry]] | None = None  # its blocking read in flight


# Sessions per pipeline of non-blocking reads on a cluster (a sweep reads every held session).
RING_READ_CHUNK = 500


class InboxReader:
    """Reads the inboxes of the sessions this worker holds. On a single Redis: one blocking
    XREADGROUP per shard of `SHARD_SIZE` sessions, all in flight at once; `read` returns what the
    first to answer read. On a cluster (`rings`, the default there): the rung sessions, read without
    blocking. `rings=False` keeps the shards on a cluster (one per slot; the bench's baseline)."""

    def __init__(self, client: aioredis.Redis, consumer: str, *, rings: bool | None = None,
                 sweep_interval_s: float = SWEEP_INTERVAL_S) -> None:
        self._client = client
        self._consumer = consumer
        self._shards: list[_Shard] = []
        use_rings = redis_cluster.cluster_of(client) is not None if rings is None else rings
        self.rings = NodeRings(client, sweep_interval_s) if use_rings else None
        self._ring_read: asyncio.Future[list[InboxEntry]] | None = None

    @property
    def sessions(self) -> frozenset[str]:
        if self.rings is not None:
            return self.rings.sessions
        return frozenset().union(*(shard.sessions for shard in self._shards))

    async def add(self, sid: str) -> list[InboxEntry]:
        """Start reading `sid`; returns entries left pending by earlier holders (to process first).
        The claim comes before the shard reads `sid`: claiming (min idle 0) after a read had already
        delivered a new entry to this consumer returned that entry a second time, and the woken
        session recorded the prompt twice (the fault suite, three runtime workers)."""
        await ensure_group(self._client, keys.inbox(sid), GROUP, track=False)
        pending = await self.claim_pending(sid)
        if self.rings is not None:
            self.rings.add(sid)
        elif not any(sid in shard.sessions for shard in self._shards):
            slot = redis_cluster.slot_group(self._client, keys.inbox(sid))
            shard = next((s for s in self._shards if len(s.sessions) < SHARD_SIZE and s.slot == slot), None)
            if shard is None:
                shard = _Shard(slot=slot)
                self._shards.append(shard)
            shard.sessions.add(sid)
            shard.packed = None  # its read in flight (if any) ends within block_ms; the next one has sid
        return pending

    def remove(self, sid: str) -> None:
        if self.rings is not None:
            self.rings.remove(sid)
        for shard in self._shards:
            if sid in shard.sessions:
                shard.sessions.discard(sid)
                shard.packed = None

    async def close(self) -> None:
        """Cancel the reads in flight (each spends its connection)."""
        tasks = [shard.task for shard in self._shards if shard.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for shard in self._shards:
            shard.task = None
        if self._ring_read is not None:
            self._ring_read.cancel()
            with contextlib.suppress(BaseException):
                await self._ring_read
            self._ring_read = None
        if self.rings is not None:
            await self.rings.close()

    async def claim_pending(self, sid: str) -> list[InboxEntry]:
        stream = keys.inbox(sid)
        out: list[InboxEntry] = []
        start = "0-0"
        while True:
            reply = await self._client.xautoclaim(stream, GROUP, self._consumer, min_idle_time=0, start_id=start, count=100)
            next_id, claimed = reply[0], reply[1]
            out.extend(await self._decode_claimed(sid, claimed))
            start = text(next_id)
            if start == "0-0":
                return out

    async def claim_foreign(self, sids: list[str], min_idle_ms: int) -> list[InboxEntry]:
        """Entries of these (held) sessions' inboxes left pending, for `min_idle_ms`, by another
        consumer: a worker that read them after its lease had passed here (one paused past its lease
        reads what was appended meanwhile once resumed, and then drops the session). `add` claims what
        is pending at the wake; this catches what such a stale reader takes later. Two round trips,
        the second only when there is something to claim."""
        pipe = self._client.pipeline(transaction=False)
        for sid in sids:
            pipe.xpending_range(keys.inbox(sid), GROUP, min="-", max="+", count=100, idle=min_idle_ms)
        replies = await pipe.execute(raise_on_error=False)
        foreign: list[tuple[str, list[str]]] = []
        for sid, reply in zip(sids, replies, strict=True):
            if isinstance(reply, Exception):
                continue  # the group is gone (a deleted session): nothing to claim
            ids = [text(p["message_id"]) for p in reply if text(p["consumer"]) != self._consumer]
            if ids:
                foreign.append((sid, ids))
        out: list[InboxEntry] = []
        for sid, ids in foreign:
            claimed: list[Any] = await self._client.xclaim(keys.inbox(sid), GROUP, self._consumer,
                                                           min_idle_time=min_idle_ms, message_ids=list[Any](ids))
            out.extend(await self._decode_claimed(sid, claimed))
        return out

    async def _decode_claimed(self, sid: str, claimed: list[Any]) -> list[InboxEntry]:
        """(entry id, fields) pairs from XAUTOCLAIM / XCLAIM; fields is None for a trimmed entry."""
        out: list[InboxEntry] = []
        for entry_id, fields in claimed:
            if fields is None:
                continue
            entry = await self._decode(sid, entry_id, fields)
            if entry is not None:
                out.append(entry)
        return out

    async def read(self, block_ms: int = 1000, count: int = 100) -> list[InboxEntry]:
        """Entries from the first shard(s) to answer. The other shards' reads stay in flight for the
        next call; a call cancelled while waiting loses nothing (the next one collects them).
        On a cluster: the sessions rung (or swept), read without blocking."""
        if self.rings is not None:
            # Shielded: a read cancelled mid-way stays in flight, and the next call collects what it
            # read (the entries are already this consumer's pending ones).
            if self._ring_read is None:
                self._ring_read = asyncio.ensure_future(self._read_rings(block_ms, count))
            try:
                return await asyncio.shield(self._ring_read)
            finally:
                if self._ring_read.done():
                    self._ring_read = None
        for shard in self._shards:
            if shard.task is None and shard.sessions:
                shard.task = asyncio.ensure_future(self._read_shard(shard, count, block_ms))
        tasks = [shard.task for shard in self._shards if shard.task is not None]
        if not tasks:
            return []
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        out: list[InboxEntry] = []
        failure: BaseException | None = None
        for shard in self._shards:
            if shard.task is not None and shard.task.done():
                task, shard.task = shard.task, None
                if task.cancelled():
                    continue
                if task.exception() is not None:
                    failure = failure or task.exception()
                    continue
                out.extend(task.result())
        self._shards = [shard for shard in self._shards if shard.sessions or shard.task is not None]
        if failure is not None and not out:
            raise failure  # the caller backs off; entries other shards read are never held back
        return out

    async def _read_rings(self, block_ms: int, count: int) -> list[InboxEntry]:
        """The rung (or swept) sessions, read without blocking: per node, one connection and one
        write of all their XREADGROUPs (redis-py's cluster pipeline costs ~4x the CPU in Python).
        A session whose read failed or filled `count` is rung again, so it does not wait for the
        next sweep; a failure is raised only when nothing was read (the caller backs off)."""
        assert self.rings is not None
        sids = await self.rings.due(block_ms)
        groups: dict[str, list[str]] = {}
        for sid in sorted(sids):
            groups.setdefault(redis_cluster.node_name(self._client, keys.inbox(sid)), []).append(sid)
        batches = [group[i : i + RING_READ_CHUNK] for group in groups.values()
                   for i in range(0, len(group), RING_READ_CHUNK)]
        results = await asyncio.gather(*(self._read_node(batch, count) for batch in batches), return_exceptions=True)
        out: list[InboxEntry] = []
        failure: BaseException | None = None
        for result in results:
            if isinstance(result, BaseException):
                failure = failure or result
            else:
                out.extend(result)
        if failure is not None and not out:
            raise failure
        return out

    async def _read_node(self, sids: list[str], count: int) -> list[InboxEntry]:
        assert self.rings is not None
        route = keys.inbox(sids[0])
        replies: list[Any] = []
        try:
            async with redis_cluster.node_connection(self._client, route) as conn:
                try:
                    await conn.send_packed_command(conn.pack_commands(
                        [("XREADGROUP", "GROUP", GROUP, self._consumer, "COUNT", count, "STREAMS", keys.inbox(sid), ">")
                         for sid in sids]))
                    for _ in sids:
                        try:
                            replies.append(await conn.read_response())
                        except ResponseError as exc:  # one session's error: the other replies follow
                            replies.append(exc)
                except BaseException:
                    await conn.disconnect()  # replies may still be on their way: the connection is spent
                    raise
        except (RedisError, OSError):
            for sid in sids:
                self.rings.ring_later(sid)
            self.rings.refresh(route)  # a failover moved the slots
            raise
        out: list[InboxEntry] = []
        for sid, reply in zip(sids, replies, strict=True):
            if isinstance(reply, ResponseError):
                if "NOGROUP" in str(reply):  # the inbox (or its group) vanished: recreate it
                    await ensure_group(self._client, keys.inbox(sid), GROUP, track=False)
                    self.rings.ring(sid)
                else:  # MOVED: the slot left this node
                    log.warning("inbox_read_failed", session_id=sid, error=str(reply)[:300])
                    self.rings.refresh(keys.inbox(sid))
                    self.rings.ring_later(sid)
                continue
            entries = await self._entries(reply)
            if len(entries) >= count:
                self.rings.ring(sid)
            out.extend(entries)
        return out

    async def _entries(self, reply: Any) -> list[InboxEntry]:
        """The entries of an XREADGROUP reply (a list of [stream, entries]; a map under RESP3)."""
        out: list[InboxEntry] = []
        for stream, entries in reply.items() if isinstance(reply, dict) else reply or []:
            sid = keys.inbox_stream_sid(text(stream))
            for entry_id, flat in entries:
                fields = dict(zip(flat[::2], flat[1::2], strict=True)) if isinstance(flat, list) else flat or {}
                entry = await self._decode(sid, entry_id, fields)
                if entry is not None:
                    out.append(entry)
        return out

    async def _read_shard(self, shard: _Shard, count: int, block_ms: int) -> list[InboxEntry]:
        try:
            reply: Any = await self._xreadgroup(shard, count, block_ms)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # One session's inbox (or its group) vanished: XREADGROUP fails for every session in the
            # call. Recreate what is missing (idempotent) so the other sessions keep being served.
            log.warning("inbox_group_recreated", error=str(exc)[:300])
            for sid in sorted(shard.sessions):
                await ensure_group(self._client, keys.inbox(sid), GROUP, track=False)
            reply = await self._xreadgroup(shard, count, block_ms)
        return await self._entries(reply)

    async def _xreadgroup(self, shard: _Shard, count: int, block_ms: int) -> Any:
        """`XREADGROUP ... STREAMS <the shard's inboxes> > ...`, sent as bytes packed once per session set.

        The command has two arguments per session and does not change between reads, but redis-py
        would pack it again for every call, on the event loop, right after each batch it read: ~1 ms
        with 200 sessions, delaying the handling of the entries just read (bench-inject).
        A raw reply (nested lists; a map under RESP3); errors as redis-py raises them."""
        if not shard.sessions:
            return []  # its last session was removed after this read was scheduled
        route = keys.inbox(next(iter(shard.sessions)))  # the shard's slot (any inbox of it)
        try:
            async with redis_cluster.node_connection(self._client, route) as conn:
                try:
                    if shard.packed is None or shard.packed[0] != (count, block_ms):
                        streams = [keys.inbox(sid) for sid in sorted(shard.sessions)]
                        packed = conn.pack_command("XREADGROUP", "GROUP", GROUP, self._consumer, "COUNT", count,
                                                   "BLOCK", block_ms, "STREAMS", *streams, *([">"] * len(streams)))
                        shard.packed = ((count, block_ms), packed)
                    await conn.send_packed_command(shard.packed[1])
                    return await conn.read_response()
                except ResponseError:
                    raise  # an error reply: the connection is in sync
                except BaseException:
                    # Failed or cancelled mid-read: a reply may still be on its way, so the connection is spent.
                    await conn.disconnect()
                    raise
        except (ResponseError, ConnectionError, TimeoutError, OSError) as exc:
            if not isinstance(exc, ResponseError) or isinstance(exc, AskError):
                await redis_cluster.refresh_route(self._client, route)  # a failover moved the slot
            raise

    async def ack(self, sid: str, entry_id: str) -> None:
        await self._client.xack(keys.inbox(sid), GROUP, entry_id)

    async def _decode(self, sid: str, entry_id: bytes | str, fields: dict) -> InboxEntry | None:
        eid = text(entry_id)
        try:
            message = parse_fields(fields)
        except (ValidationError, ValueError) as exc:
            await dead_letter(self._client, keys.inbox(sid), GROUP, eid, fields, f"invalid inbox entry: {exc}", 1)
            await self.ack(sid, eid)
            return None
        return InboxEntry(session_id=sid, entry_id=eid, message=message, read_at=time.time())

