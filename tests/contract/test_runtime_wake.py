"""Contract of `gamma:runtime:wake`: proxy -> runtime (group `runtime`)."""

from __future__ import annotations

import redis.asyncio as aioredis

from shared import keys
from shared.contracts.wake import Wake
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip


async def test_every_wake_reason_round_trips(redis_url: str, redis_client: aioredis.Redis) -> None:
    messages = [Wake(session_id=f"s{i}", reason=r) for i, r in enumerate(("message", "resume", "compaction", "notification"))]
    await assert_round_trip(redis_url, redis_client, stream=keys.WAKE, groups=[keys.RUNTIME_GROUP], model=Wake,
                            messages=messages)


async def test_invalid_wake_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.WAKE, group=keys.RUNTIME_GROUP, model=Wake,
        bad_bodies=[{"wake_id": "w1"}, {"session_id": "s1", "reason": "boredom"}, {"session_id": "s1", "extra": 1}],
        valid=Wake(session_id="s-ok"),
    )
    assert "session_id" in letters[0].error
    assert "reason" in letters[1].error
    assert "extra" in letters[2].error
