"""What a digest handler reads under the session's lock, in one round trip (builder.py).

A change, a flush and a record each read whether the session is deleted (two keys), the ref's state,
the lease and the SessionLive fence the digest recorded; a change also whether it was handled
already. One command at a time that was five to seven round trips per handler, the digest's largest
CPU cost under load (bench/results/stream.md "bench-e2e CPU per operation"). The lock keeps what the digest itself
writes (state, live fence, handled) from changing meanwhile; the lease is the runtime's and can
change at any moment, before or after the read, as it could before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from services.digest.revisions import RefState
from shared.contracts.streams.artifacts import ArtifactChange
from shared.redis import keys
from shared.redis.deletion import deleted_from, queue_is_deleted


@dataclass(frozen=True)
class SessionView:
    deleted: bool
    state: RefState | None
    lease: bytes | None
    live: dict[Any, Any] = field(default_factory=dict)  # keys.digest_live: fence, since
    handled: bool = False  # only asked for a change (handled.py)


async def read_view(client: aioredis.Redis, sid: str, ref: str, change: ArtifactChange | None = None) -> SessionView:
    pipe = client.pipeline(transaction=False)
    if change is not None:
        # handled.py's two reads: the session's hash and the legacy per-change key
        pipe.hexists(keys.digest_handled(sid), change.id)
        pipe.exists(keys.once("digest-change", change.id))
    queue_is_deleted(pipe, sid)
    pipe.hget(keys.revisions(sid), ref)
    pipe.get(keys.lease(sid))
    pipe.hgetall(keys.digest_live(sid))
    replies = await pipe.execute()
    handled = False
    if change is not None:
        handled, replies = any(replies[:2]), replies[2:]
    status, score, raw, lease, live = replies
    return SessionView(deleted=deleted_from(status, score),
                       state=RefState.model_validate_json(raw) if raw is not None else None,
                       lease=lease, live=dict(live or {}), handled=handled)
