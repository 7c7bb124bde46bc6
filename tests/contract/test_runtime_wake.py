"""Contract of `gamma:runtime:wake`: proxy -> runtime (group `runtime`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from services.proxy.rows import create_row
from shared.contracts.http import ModelConfig
from shared.contracts.streams.lifecycle import LIFECYCLE_ADAPTER, SessionLive
from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.streams.bus import decode_fields, publish
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip, pel_empty
from tests.support.inproc import connected_broker, running, settings_for
from tests.support.polling import eventually


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


async def test_wake_is_handled_by_the_real_runtime(redis_url: str, redis_client: aioredis.Redis, tmp_path: Path) -> None:
    """Producer: `shared.streams.bus.publish(broker, WAKE, Wake)` as the proxy's message route and the
    notifications' urgent path call it; consumer: the runtime app (its subscription and
    `Worker.on_wake`), which takes the lease and announces `SessionLive` with the same wake id."""
    from services.runtime.app import create_app

    row = await create_row(redis_client, "alice", "base", ModelConfig())
    wake = Wake(session_id=row.id, reason="message")
    async with running(create_app, settings_for(redis_url, tmp_path)), connected_broker(redis_url) as broker:
        await publish(broker, keys.WAKE, wake)

        async def announced() -> list[Any]:
            events = [LIFECYCLE_ADAPTER.validate_python(decode_fields(f)[0])
                      for _, f in await redis_client.xrange(keys.LIFECYCLE)]
            return [e for e in events if isinstance(e, SessionLive)]

        [live] = await eventually(announced, timeout=60, what="SessionLive from the runtime")
        assert await redis_client.exists(keys.lease(row.id))
        await eventually(pel_empty(redis_client, keys.WAKE, keys.RUNTIME_GROUP), what="the wake acked")
    assert (live.session_id, live.wake_id) == (row.id, wake.wake_id)
    assert live.fence >= 1
    assert await redis_client.xlen(keys.DEADLETTER) == 0
