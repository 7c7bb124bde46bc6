"""`order_key` (shared/streams/bus_subscriber.py): a batch's entries run side by side per key (session), each
key's in stream order; a failing entry holds back only the later entries of its own key."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from structlog.testing import capture_logs

from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.streams.bus import by_session, publish
from tests.integration.test_bus import _true, _zero, consumer, new_stream, pending, producer
from tests.support.polling import eventually


async def publish_rounds(redis_url: str, stream: str, sessions: list[str], rounds: int) -> None:
    async with producer(redis_url) as pub:
        for n in range(rounds):
            for sid in sessions:
                await publish(pub, stream, Wake(session_id=sid, wake_id=f"w_{sid}{n}"))


async def test_sessions_run_side_by_side_each_in_its_stream_order(redis_url: str, redis_client: aioredis.Redis) -> None:
    stream = new_stream()
    await publish_rounds(redis_url, stream, ["slow", "b", "c"], rounds=3)  # one batch: 9 entries
    calls: list[str] = []

    async def handle(wake: Wake) -> None:
        if wake.session_id == "slow":
            await asyncio.sleep(0.2)
        calls.append(wake.wake_id)

    async with consumer(redis_url, redis_client, stream, handle, order_key=by_session):
        await eventually(lambda: _true(len(calls) == 9), what="all 9 entries")
        await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
    for sid in ("slow", "b", "c"):
        assert [c for c in calls if c.startswith(f"w_{sid}")] == [f"w_{sid}{n}" for n in range(3)]
    # The fast sessions did not wait behind the slow one (one after the other they would have).
    assert calls.index("w_c2") < calls.index("w_slow0")


async def test_a_failure_holds_back_only_its_own_session(redis_url: str, redis_client: aioredis.Redis) -> None:
    stream = new_stream()
    await publish_rounds(redis_url, stream, ["a", "b"], rounds=3)
    calls: list[str] = []

    async def handle(wake: Wake) -> None:
        calls.append(wake.wake_id)
        if wake.wake_id == "w_a0" and calls.count("w_a0") == 1:
            raise RuntimeError("first attempt fails")

    with capture_logs():
        async with consumer(redis_url, redis_client, stream, handle, claim_idle_ms=500, order_key=by_session):
            await eventually(lambda: _true(len(calls) == 7), what="the retry of a's entries")
            await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
    assert [c for c in calls if c.startswith("w_b")] == ["w_b0", "w_b1", "w_b2"]
    # a1 and a2 were not handled before a0 succeeded: the claimer retries the three in stream order.
    assert [c for c in calls if c.startswith("w_a")] == ["w_a0", "w_a0", "w_a1", "w_a2"]
    assert await redis_client.xlen(keys.DEADLETTER) == 0
