"""Contract of `gamma:lifecycle`: runtime -> notifications and digest (a group each)."""

from __future__ import annotations

import redis.asyncio as aioredis

from shared import keys
from shared.contracts.lifecycle import LIFECYCLE_ADAPTER, SessionDormant, SessionLive
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip

GROUPS = ["notifications", "digest"]


async def test_both_lifecycle_members_reach_both_groups(redis_url: str, redis_client: aioredis.Redis) -> None:
    messages = [
        SessionLive(session_id="s1", wake_id="w1", fence=3, worker_id="runtime-a"),
        SessionDormant(session_id="s1", fence=3),
        SessionDormant(session_id="s2", fence=7, reason="suspend"),
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.LIFECYCLE, groups=GROUPS, model=LIFECYCLE_ADAPTER,
                            messages=messages)


async def test_invalid_lifecycle_event_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.LIFECYCLE, group="digest", model=LIFECYCLE_ADAPTER,
        bad_bodies=[
            {"type": "session_exploded", "session_id": "s1", "fence": 1},
            {"type": "session_live", "session_id": "s1", "fence": 1},  # no wake_id / worker_id
            {"session_id": "s1", "fence": 1},  # no discriminator
        ],
        valid=SessionDormant(session_id="s1", fence=1),
    )
    assert "session_exploded" in letters[0].error
    assert "wake_id" in letters[1].error
