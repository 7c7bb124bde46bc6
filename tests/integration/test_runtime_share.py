"""services/runtime/hosting/share.py against a real Redis: the live workers are those with a recent
heartbeat, and a worker holding its share leaves the next session to a peer while no wake waits,
bounded in time."""

from __future__ import annotations

from collections.abc import Callable

import redis.asyncio as aioredis

from services.runtime.hosting.share import (
    PAUSE_MAX_S,
    PAUSE_STEP_S,
    fair_share,
    heartbeat,
    over_share,
    pause_while_over_share,
)
from shared.contracts.base import now_ms
from shared.redis import keys

LIVE_MS = 3_000


async def live_sessions(client: aioredis.Redis, n: int) -> None:
    await client.zadd(keys.RUNTIME_LIVE, {f"s{i}": now_ms() for i in range(n)})
    # The wake group, every wake read (no backlog).
    await client.xgroup_create(keys.WAKE, keys.RUNTIME_GROUP, id="$", mkstream=True)


def test_the_fair_share_rounds_up() -> None:
    assert [fair_share(s, 3) for s in (0, 1, 3, 4, 9, 10)] == [0, 1, 1, 2, 3, 4]
    assert fair_share(5, 0) == 5  # no worker known: all of them


async def test_a_worker_at_its_share_leaves_the_next_session_to_its_peers(redis_client: aioredis.Redis) -> None:
    for worker in ("w1", "w2", "w3"):
        await heartbeat(redis_client, worker)
    await live_sessions(redis_client, 9)
    # 3/3/3: a tenth session makes the share 4, so any of them may take it.
    assert not await over_share(redis_client, 3, LIVE_MS)
    # 5 of 9 while the others hold 4 between them: the next one goes elsewhere.
    assert await over_share(redis_client, 5, LIVE_MS)
    assert not await over_share(redis_client, 0, LIVE_MS)
    # Wakes waiting unread: the peers are busy, so nobody holds back.
    await redis_client.xadd(keys.WAKE, {"data": "{}"})
    assert not await over_share(redis_client, 5, LIVE_MS)


async def test_a_dead_workers_old_heartbeat_does_not_count(redis_client: aioredis.Redis) -> None:
    await heartbeat(redis_client, "alive")
    await redis_client.zadd(keys.RUNTIME_WORKERS, {"dead": now_ms() - 10 * LIVE_MS})
    await live_sessions(redis_client, 6)
    # One live worker: nobody to leave sessions to, it takes them all.
    assert not await over_share(redis_client, 6, LIVE_MS)
    # A heartbeat past a minute is dropped by the next beat.
    await redis_client.zadd(keys.RUNTIME_WORKERS, {"dead": now_ms() - 120_000})
    await heartbeat(redis_client, "alive")
    assert await redis_client.zrange(keys.RUNTIME_WORKERS, 0, -1) == [b"alive"]


async def test_the_pause_is_bounded_and_skipped_within_the_share(redis_client: aioredis.Redis) -> None:
    """Counted in polls of the worker's own state, one per PAUSE_STEP_S: over its share the pause
    ends after its bound's worth of polls; within it, after the first."""
    await heartbeat(redis_client, "w1")
    await heartbeat(redis_client, "w2")
    await live_sessions(redis_client, 4)
    polls: list[int] = []

    def held(n: int) -> Callable[[], int]:
        def poll() -> int:
            polls.append(n)
            return n
        return poll

    await pause_while_over_share(redis_client, held(4), LIVE_MS, lambda: False)  # over: waits, then reads
    assert len(polls) == round(PAUSE_MAX_S / PAUSE_STEP_S)
    polls.clear()
    await pause_while_over_share(redis_client, held(2), LIVE_MS, lambda: False)  # 2 of 4 with 2 workers: at once
    assert len(polls) == 1
