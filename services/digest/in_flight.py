"""The digest's side of the in-flight set (shared/streams/causal.py): a numbered change leaves it once its
digest is out (inbox or manifest) or nothing is left to tell (seen, dismissed, recorded)."""

from __future__ import annotations

import redis.asyncio as aioredis

from services.digest.revisions import RefState
from shared.streams import causal


async def release_settled(client: aioredis.Redis, sid: str, ref: str, state: RefState,
                          flying: list[tuple[int, str]] | None = None) -> None:
    """Called after every save of `ref`'s state. Only changes this ref has handled (numbered up to its
    `max_seq`) are candidates: one still on the changes stream stays in flight. `flying`: the caller
    already read `causal.in_flight(client, sid, state.max_seq)` after the save."""
    if state.max_seq == 0:
        return
    pending = state.undelivered_seqs()
    if flying is None:
        flying = await causal.in_flight(client, sid, state.max_seq)
    done = [(seq, r) for seq, r in flying if r == ref and seq not in pending]
    await causal.settle(client, sid, done)
