"""A loop of redis-py commands stops on its first cancel, wherever the cancel lands.

redis-py sends each command under asyncio.wait_for (the clients have a socket timeout), and Python
3.11's wait_for swallowed about one cancel in three that landed there: the digest's due loop, the
bus keeper and the compaction hold ran on after their cancel (shared/serving/cancel_safe.py)."""

from __future__ import annotations

import asyncio
import random

import redis.asyncio as aioredis

from shared.redis.reconnect import connect


async def test_every_cancel_stops_a_loop_of_redis_commands(redis_url: str) -> None:
    client: aioredis.Redis = connect(redis_url)
    rng = random.Random(7)
    survivor: asyncio.Task[None] | None = None

    async def loop_forever() -> None:
        while True:
            await client.zrangebyscore("gamma:test:due", "-inf", 0, start=0, num=10, withscores=True)

    try:
        for _ in range(150):
            task = asyncio.ensure_future(loop_forever())
            for _ in range(rng.randrange(1, 30)):  # a few commands in: the cancel lands anywhere in one
                await asyncio.sleep(0)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=5)
            if task not in done:
                survivor = task
                break
            assert task.cancelled()
    finally:
        while survivor is not None and not survivor.done():  # a swallowed cancel: cancel it until it ends
            survivor.cancel()
            await asyncio.wait({survivor}, timeout=1)
        await client.aclose()
    assert survivor is None, "a loop of redis commands ran on after its cancel"
