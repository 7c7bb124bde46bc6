"""Contract of `gamma:compaction:requests`: runtime -> compaction (group `compaction`)."""

from __future__ import annotations

import redis.asyncio as aioredis

from shared import keys
from shared.contracts.compaction import CompactionRequest
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip


async def test_compaction_requests_round_trip(redis_url: str, redis_client: aioredis.Redis) -> None:
    messages = [
        CompactionRequest(session_id="s1", upto_entry_id="e10", first_kept_entry_id="e8", tokens_before=120_000),
        CompactionRequest(session_id="s1", upto_entry_id="e20", first_kept_entry_id="e18",
                          previous_summary="## Goal\nship", previous_details={"readFiles": ["a.txt"]},
                          custom_instructions="keep the deck outline", model="gpt-5-mini", reserve_tokens=8000),
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.COMPACTION_REQUESTS, groups=["compaction"],
                            model=CompactionRequest, messages=messages)


async def test_invalid_compaction_request_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.COMPACTION_REQUESTS, group="compaction", model=CompactionRequest,
        bad_bodies=[{"session_id": "s1", "upto_entry_id": "e1"}],
        valid=CompactionRequest(session_id="s1", upto_entry_id="e1", first_kept_entry_id="e1"),
    )
    assert "first_kept_entry_id" in letters[0].error
