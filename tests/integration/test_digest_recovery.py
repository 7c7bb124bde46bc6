"""Digest recovery after faults, against a real Redis: late redeliveries and parked changes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis.asyncio as aioredis

from services.digest.builder import DigestBuilder
from shared.contracts.streams.lifecycle import SessionLive
from shared.redis import keys
from tests.integration.test_digest_builder import DOC, SID, deck, doc_change, injections, wait_for


async def _live(client: aioredis.Redis, builder: DigestBuilder, fence: int) -> None:
    await client.hset(keys.session_row(SID), keys.FENCE_FIELD, fence)  # the runtime HINCRBYs it for every lease
    await client.set(keys.lease(SID), f"w1:{fence}")
    await builder.on_live(SessionLive(session_id=SID, wake_id=f"w{fence}", fence=fence, worker_id="w1"))


async def _run(builder: DigestBuilder) -> asyncio.Task[None]:
    return asyncio.create_task(builder.run_due())


async def test_a_late_sessionlive_of_an_older_lease_does_not_park_later_changes(
    redis_client: aioredis.Redis, data_dir: Path
) -> None:
    """Fault suite: a SessionLive that failed during a Redis restart was retried by the claimer after
    the next lease's SessionLive; its older fence made every later change wait for a SessionLive that
    had already been handled, so nothing was sent (seen=8, current=18, pending_since=null)."""
    builder = DigestBuilder(redis_client, data_dir, debounce_ms=100, max_wait_ms=3_600_000, poll_s=0.02)
    task = await _run(builder)
    try:
        await _live(redis_client, builder, 4)
        await builder.on_live(SessionLive(session_id=SID, wake_id="w3", fence=3, worker_id="w0"))  # late retry
        assert await redis_client.hget(keys.digest_live(SID), "fence") == b"4"
        await builder.on_change(doc_change("agent", 1, deck()))
        await builder.on_change(doc_change("user", 2, deck(card_2="Edited")))
        # The debounce sends it: the fallback (max_wait_ms, an hour here) never would within the wait.
        await wait_for(lambda: _count(redis_client, 1), limit_s=20.0)
        [inj] = await injections(redis_client)
        assert inj.source_id == f"{DOC}@2" and inj.from_revision == 1
    finally:
        task.cancel()


async def test_a_change_waiting_for_an_unhandled_sessionlive_is_still_sent(
    redis_client: aioredis.Redis, data_dir: Path
) -> None:
    """A lease whose SessionLive the digest never handles (dead-lettered): the change stays due and
    goes out at the debounce bound instead of staying an unsent note for ever."""
    builder = DigestBuilder(redis_client, data_dir, debounce_ms=100, max_wait_ms=600, poll_s=0.02)
    task = await _run(builder)
    try:
        await _live(redis_client, builder, 1)
        await builder.on_change(doc_change("agent", 1, deck()))
        await redis_client.set(keys.lease(SID), "w2:2")  # a new lease; its SessionLive is lost
        await builder.on_change(doc_change("user", 2, deck(card_3="Edited")))
        await wait_for(lambda: _count(redis_client, 1), limit_s=5.0)
        [inj] = await injections(redis_client)
        assert inj.source_id == f"{DOC}@2" and "card_3" in inj.injection.content
        state = await builder.revisions.load(SID, DOC)
        assert state is not None and state.sent == [2] and state.pending_since is None
    finally:
        task.cancel()


async def _count(client: aioredis.Redis, n: int) -> bool:
    return len(await injections(client)) == n
