"""Contract of `gamma:injections:recorded`: runtime -> notifications and digest (a group each)."""

from __future__ import annotations

import redis.asyncio as aioredis

from shared import keys
from shared.contracts.recorded import InjectionRecorded
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip

GROUPS = ["notifications", "digest"]


async def test_recorded_injections_of_every_source_reach_both_groups(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    messages = [
        InjectionRecorded(session_id="s1", source="notification", source_id="n1", entry_id="e1"),
        InjectionRecorded(session_id="s1", source="notification", source_id="n1#1", entry_id="e2"),
        InjectionRecorded(session_id="s1", source="artifact", source_id="file:brief.xml@5", entry_id="e3",
                          ref="file:brief.xml", to_revision=5),
        InjectionRecorded(session_id="s1", source="client", source_id="p_1", entry_id="e4"),
        InjectionRecorded(session_id="s1", source="system", source_id="todo", entry_id="e5"),
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.INJECTIONS_RECORDED, groups=GROUPS,
                            model=InjectionRecorded, messages=messages)


async def test_invalid_recorded_injection_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.INJECTIONS_RECORDED, group="notifications", model=InjectionRecorded,
        bad_bodies=[
            {"session_id": "s1", "source": "rumour", "source_id": "x", "entry_id": "e"},
            {"session_id": "s1", "source": "artifact", "source_id": "x"},
        ],
        valid=InjectionRecorded(session_id="s1", source="notification", source_id="n9", entry_id="e9"),
    )
    assert "source" in letters[0].error
    assert "entry_id" in letters[1].error
