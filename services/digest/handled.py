"""Which artifact changes the digest has handled, so a redelivered entry (a crash between the handling
and the XACK, a claim) is skipped: a hash per session (`keys.digest_handled`), expiring
`keys.DIGEST_HANDLED_TTL_S` after the session's last change.

Legacy global keys per change (`keys.once("digest-change", id)`, ~90 B plus an expires entry, three for
a deck) are still read, and expire within their TTL (docs/integration.md "Dormant sessions in Redis": a dormant
session's cost).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from shared.contracts.streams.artifacts import ArtifactChange
from shared.redis import keys


async def handled(client: aioredis.Redis, change: ArtifactChange) -> bool:
    pipe = client.pipeline(transaction=False)
    pipe.hexists(keys.digest_handled(change.session_id), change.id)
    pipe.exists(keys.once("digest-change", change.id))
    return any(await pipe.execute())


async def mark_handled(client: aioredis.Redis, change: ArtifactChange) -> None:
    pipe = client.pipeline(transaction=True)  # one key: one slot on a cluster
    queue_mark_handled(pipe, change)
    await pipe.execute()


def queue_mark_handled(pipe: Any, change: ArtifactChange) -> None:
    """`mark_handled` on a caller's pipeline (two replies): the builder's save of the change's state."""
    key = keys.digest_handled(change.session_id)
    pipe.hset(key, change.id, "1")
    pipe.expire(key, keys.DIGEST_HANDLED_TTL_S)
