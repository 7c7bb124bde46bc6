"""What every service needs to know about a deleted session (docs/architecture.md "Session lifecycle").

The proxy deletes (services/proxy/dormant/erase.py): the row's `status` reads `deleting` while the erase runs,
and the id is a tombstone in `gamma:sessions:deleted` once it is done. Writers that could bring a
session back (a wake, a late digest, a compaction answer, a notification) ask `is_deleted` first and
write nothing for it. Every key of a session carries its `{sid}` hash tag; `session_keys` finds them
all (on a cluster, on the node that holds the slot, with `CLUSTER GETKEYSINSLOT`; on a single Redis
with one SCAN of the keyspace).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from shared.redis import keys, redis_cluster
from shared.redis.redis_wire import text

SCAN_COUNT = 1000


async def is_deleted(client: aioredis.Redis, sid: str) -> bool:
    """Being deleted (the row says so) or deleted (a tombstone)."""
    pipe = client.pipeline(transaction=False)  # one round trip (two keys, two slots on a cluster)
    queue_is_deleted(pipe, sid)
    status, score = await pipe.execute()
    return deleted_from(status, score)


def queue_is_deleted(pipe: Any, sid: str) -> None:
    """Queue `is_deleted`'s two reads on a caller's pipeline (two replies, for `deleted_from`)."""
    pipe.hget(keys.session_row(sid), "status")
    pipe.zscore(keys.SESSIONS_DELETED, sid)


def deleted_from(status: bytes | str | None, score: float | None) -> bool:
    return (status is not None and text(status) == keys.STATUS_DELETING) or score is not None


def session_pattern(sid: str) -> str:
    """Session ids are `[A-Za-z0-9_-]` (shared/storage/disk.py SESSION_ID): nothing in them is a glob character."""
    return "gamma:{" + sid + "}:*"


async def session_keys(client: aioredis.Redis, sid: str) -> list[str]:
    """Every key under the session's hash tag."""
    cluster = redis_cluster.cluster_of(client)
    prefix = "gamma:{" + sid + "}:"
    if cluster is not None:
        await cluster.initialize()
        node = cluster.get_node_from_key(keys.session_row(sid))
        slot = redis_cluster.slot(keys.session_row(sid))
        count = SCAN_COUNT
        while True:  # GETKEYSINSLOT has no cursor: ask again for more while the answer is full
            found: Any = await cluster.execute_command("CLUSTER GETKEYSINSLOT", slot, count, target_nodes=node)
            if len(found) < count:
                break
            count *= 2
        return [name for name in (text(k) for k in found) if name.startswith(prefix)]
    return [text(k) async for k in client.scan_iter(match=session_pattern(sid), count=SCAN_COUNT)]


async def global_members(client: aioredis.Redis, sid: str) -> dict[str, list[str]]:
    """The session's members in the global sorted sets (scheduling, liveness, due digests)."""
    out: dict[str, list[str]] = {keys.DORMANT_DUE: [sid], keys.RUNTIME_LIVE: [sid]}
    # DIGEST_DUE members are `json.dumps([sid, ref])` (services/digest/builder.py); `[` is a glob character.
    match = '\\["' + sid + '", *'
    due = [text(m) async for m, _ in client.zscan_iter(keys.DIGEST_DUE, match=match, count=SCAN_COUNT)]
    out[keys.DIGEST_DUE] = due
    return out
