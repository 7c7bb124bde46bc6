"""renew_all and a close racing it (services/runtime/live/lease.py): a session whose lease was released while
the renewal pipeline was in flight must not keep a live score, or the orphan scan wakes it again."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from services.runtime.live.lease import Lease, renew_all
from shared.redis import keys


async def test_a_lease_released_during_the_renewal_keeps_no_live_score(redis_client: aioredis.Redis,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    held = await Lease.acquire(redis_client, "s_live_a", "w1", 10_000)
    closing = await Lease.acquire(redis_client, "s_live_b", "w1", 10_000)
    assert held is not None and closing is not None
    real_execute = aioredis.client.Pipeline.execute

    async def release_meanwhile(self: aioredis.client.Pipeline, raise_on_error: bool = True) -> list[object]:
        # The close of s_live_b runs while the pipeline is on the wire: release, then its ZREM.
        await closing.release()
        await redis_client.zrem(keys.RUNTIME_LIVE, closing.sid)
        return await real_execute(self, raise_on_error)

    with monkeypatch.context() as patched:
        patched.setattr(aioredis.client.Pipeline, "execute", release_meanwhile)
        ok = await renew_all(redis_client, [held, closing], [], keys.RUNTIME_LIVE, 1_000)
    assert ok == [True, False]
    assert await redis_client.zscore(keys.RUNTIME_LIVE, held.sid) == 1_000
    assert await redis_client.zscore(keys.RUNTIME_LIVE, closing.sid) is None


async def test_a_lease_released_before_the_renewal_is_not_scored_again(redis_client: aioredis.Redis) -> None:
    lease = await Lease.acquire(redis_client, "s_live_c", "w1", 10_000)
    assert lease is not None
    await lease.release()
    assert await renew_all(redis_client, [lease], [], keys.RUNTIME_LIVE, 1_000) == [False]
    assert await redis_client.zscore(keys.RUNTIME_LIVE, lease.sid) is None
