"""The per-session inbox `gamma:{sid}:inbox`: plain XADD {type, data} and one multiplexed reader.

Sessions are dynamic, so the runtime does not use FastStream here but the shared StreamReader
(shared/streams/stream_reader.py) in the group `runtime`. On a single Redis: sharded blocking XREADGROUPs.
On a Redis Cluster a blocking read names one slot only, so there every append also rings a doorbell
(sharded Pub/Sub, `shared/streams/inbox_rings.py`) and the worker reads the rung inboxes without blocking,
batched per node: one connection per node instead of one per live session (bench/cluster_inbox.py).
A new lease holder first claims the previous holder's pending entries so nothing the dead worker read
but did not ack is lost; after a failed read the reader hands out its own pending entries that the
lost reply held (shared/streams/stream_handed.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import ValidationError

from shared.contracts.streams.inbox import INBOX_ADAPTER, InboxMessage
from shared.redis import keys, redis_cluster, topology
from shared.redis.redis_wire import text
from shared.streams.bus import dead_letter, ensure_group
from shared.streams.inbox_rings import SWEEP_INTERVAL_S, NodeRings
from shared.streams.stream_packing import ReadGroup, id_key
from shared.streams.stream_reader import StreamReader
from shared.telemetry import tracing

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


class InboxReader:
    """Reads the inboxes of the sessions this worker holds, in the group `runtime`, through the shared
    StreamReader (shared/streams/stream_reader.py): sharded blocking reads on a single Redis; on a cluster
    (`rings`, the default there) the rung sessions, read without blocking. `rings=False` keeps the
    shards on a cluster (one per slot; the bench's baseline)."""

    def __init__(self, client: aioredis.Redis, consumer: str, *, rings: bool | None = None,
                 sweep_interval_s: float = SWEEP_INTERVAL_S) -> None:
        self._client = client
        self._consumer = consumer
        use_rings = redis_cluster.cluster_of(client) is not None if rings is None else rings
        self.streams = StreamReader(client, keys.inbox, group=ReadGroup(GROUP, consumer),
                                    rings=NodeRings(client, sweep_interval_s) if use_rings else None)

    @property
    def rings(self) -> NodeRings | None:
        return self.streams.rings

    @property
    def sessions(self) -> frozenset[str]:
        return self.streams.names

    async def add(self, sid: str) -> list[InboxEntry]:
        """Start reading `sid`; returns entries left pending by earlier holders (to process first).
        The claim comes before the shard reads `sid`: claiming (min idle 0) after a read had already
        delivered a new entry to this consumer returned that entry a second time, and the woken
        session recorded the prompt twice (the fault suite, three runtime workers)."""
        await ensure_group(self._client, keys.inbox(sid), GROUP, track=False)
        pending = await self.claim_pending(sid)
        # Handed out here: a read of this consumer's own pending entries after a failed read (a reply
        # lost to a reset, shared/streams/stream_handed.py) starts after them.
        await self.streams.add(sid, max((e.entry_id for e in pending), key=id_key, default="0-0"))
        return pending

    def remove(self, sid: str) -> None:
        self.streams.remove(sid)

    async def close(self) -> None:
        """Cancel the reads in flight (each spends its connection)."""
        await self.streams.close()

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
            self.streams.claimed(sid, [text(entry_id) for entry_id, _ in claimed])
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
        """Entries from the first shard(s) to answer (StreamReader.read); an invalid entry goes to
        the dead letters, acked."""
        out: list[InboxEntry] = []
        for entry in await self.streams.read(block_ms, count):
            decoded = await self._decode(entry.name, entry.entry_id, entry.fields)
            if decoded is not None:
                out.append(decoded)
        return out

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

