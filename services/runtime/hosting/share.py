"""A worker's fair share of the live sessions, and the pause before its next wake read when it holds more.

Wakes are read a few at a time (app.py, `GAMMA_RUNTIME_WAKES_AT_ONCE`), which spreads a burst over
the workers that are free. Wakes that come one by one are not spread by that: every worker is idle, and whichever Redis
serves first (the same one, often: 7/1/1 over three workers in tests/reliability/test_runtime_workers)
takes each. So a worker that one more session would put over its share of the live sessions waits a
little before it reads the next wake, and a peer reads it first; the orphan scan stops there too.
Only while no wake waits unread: a backlog means the peers are busy, and a pause would only delay it
(a first version paused in bursts too: first-answer p95 with three workers 11 s against 2.9 s).
The wait is bounded (`PAUSE_MAX_S`): a peer that is counted as alive but does not read (busy, stuck)
delays a wake by at most that, never strands it. The live workers are those whose heartbeat
(`gamma:runtime:workers`) is recent.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from shared.contracts.base import now_ms
from shared.redis import keys
from shared.redis.redis_wire import text

log = structlog.get_logger()
PAUSE_STEP_S = 0.1
PAUSE_MAX_S = 2.0
# A heartbeat this old is dropped from the set (a dead worker's; a live one beats again long before).
FORGET_MS = 60_000


def fair_share(live_sessions: int, live_workers: int) -> int:
    """Sessions a worker may hold before it leaves new wakes to its peers (rounded up)."""
    return math.ceil(live_sessions / max(live_workers, 1))


async def heartbeat(client: aioredis.Redis, worker_id: str) -> None:
    """Each housekeeping pass: this worker is alive. (The wake group's consumers cannot tell: Redis
    7.0 does not refresh a consumer's idle time on a read that returns nothing.)"""
    now = now_ms()
    pipe = client.pipeline(transaction=False)
    pipe.zadd(keys.RUNTIME_WORKERS, {worker_id: now})
    pipe.zremrangebyscore(keys.RUNTIME_WORKERS, "-inf", now - FORGET_MS)
    await pipe.execute()


async def over_share(client: aioredis.Redis, held: int, live_ms: int) -> bool:
    """Whether one more session would put a worker holding `held` over its share of the live
    sessions, counted with that one; the workers that beat within `live_ms` share them. False when
    unsure."""
    if held == 0:
        return False
    try:
        # One round trip, not two: this runs before every wake read, and on a loop busy with streaming
        # sessions each round trip waits a turn of it (docs/capacity.md "Per wake").
        pipe = client.pipeline(transaction=False)
        pipe.zcard(keys.RUNTIME_LIVE)
        pipe.zcount(keys.RUNTIME_WORKERS, now_ms() - live_ms, "+inf")
        total, workers = (int(n) for n in await pipe.execute())
        if workers <= 1 or held + 1 <= fair_share(total + 1, workers):
            return False
        return not await wakes_waiting(client)
    except (RedisError, OSError):
        return False  # never hold wakes back on a Redis hiccup


async def wakes_waiting(client: aioredis.Redis) -> bool:
    """Wakes no worker has read yet (the group's lag): the peers are busy, so leaving wakes to them
    would only delay them (a burst is spread by the one-wake reads alone). Unknown lag counts as yes."""
    groups: list[dict[Any, Any]] = list(await client.xinfo_groups(keys.WAKE))
    for group in groups:
        fields = {text(k): v for k, v in group.items()}
        if text(fields.get("name", "")) == keys.RUNTIME_GROUP:
            return fields.get("lag") is None or int(fields["lag"]) > 0
    return True


async def pause_while_over_share(client: aioredis.Redis, held: Callable[[], int], live_ms: int,
                                 stopping: Callable[[], bool]) -> None:
    """Before the next wake read: wait (at most PAUSE_MAX_S) while this worker is over its share."""
    for step in range(round(PAUSE_MAX_S / PAUSE_STEP_S)):  # polled: the peers' state is in Redis
        if stopping() or not await over_share(client, held(), live_ms):
            if step:
                log.info("wake_read_paused", held=held(), paused_s=round(step * PAUSE_STEP_S, 1))
            return
        await asyncio.sleep(PAUSE_STEP_S)
