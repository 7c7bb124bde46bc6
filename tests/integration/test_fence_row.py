"""The fence as a field of the session row (shared/redis/fence.py), against a real Redis: the lease takes it
there, a legacy fence key is folded in (never lowering it) by the lease script and
by the dormancy sweep, readers take the larger of the two meanwhile, and the sweep drops the row's
fields at their defaults."""

from __future__ import annotations

import redis.asyncio as aioredis

from services.proxy.rows import SessionRow, load_state
from services.runtime.live.lease import Lease, raise_fence
from shared.redis import dormancy, keys
from shared.redis.fence import fence_of, read_fence

SID = "s_fence_row"


async def _row(client: aioredis.Redis, **extra: str) -> None:
    row = SessionRow(id=SID, owner="alice", created_at=1, updated_at=1)
    await client.hset(keys.session_row(SID), mapping={**row.to_hash(), **extra})


async def test_the_lease_increments_the_row_field_and_no_fence_key_appears(redis_client: aioredis.Redis) -> None:
    await _row(redis_client)
    assert await read_fence(redis_client, SID) is None  # never leased
    first = await Lease.acquire(redis_client, SID, "w1", 10_000)
    assert first is not None and first.fence == 1
    await first.release()
    second = await Lease.acquire(redis_client, SID, "w2", 10_000)
    assert second is not None and second.fence == 2
    assert await redis_client.hget(keys.session_row(SID), keys.FENCE_FIELD) == b"2"
    assert not await redis_client.exists(keys.legacy_fence(SID))
    state = await load_state(redis_client, SID)
    assert state is not None and state.fence == 2 and state.leased


async def test_a_legacy_fence_key_is_read_then_folded_by_the_next_lease(redis_client: aioredis.Redis) -> None:
    await _row(redis_client, **{keys.FENCE_FIELD: "3"})
    await redis_client.set(keys.legacy_fence(SID), 7)  # a legacy fence key
    assert await read_fence(redis_client, SID) == 7
    state = await load_state(redis_client, SID)
    assert state is not None and state.fence == 7
    lease = await Lease.acquire(redis_client, SID, "w1", 10_000)
    assert lease is not None and lease.fence == 8  # above both: fences never go back
    assert not await redis_client.exists(keys.legacy_fence(SID))
    assert await read_fence(redis_client, SID) == 8
    await raise_fence(redis_client, SID, 5)  # never lowers it
    assert await read_fence(redis_client, SID) == 8
    await raise_fence(redis_client, SID, 12)
    assert await read_fence(redis_client, SID) == 12


async def test_a_smaller_legacy_key_never_lowers_the_row_field(redis_client: aioredis.Redis) -> None:
    await _row(redis_client, **{keys.FENCE_FIELD: "9"})
    await redis_client.set(keys.legacy_fence(SID), 4)
    lease = await Lease.acquire(redis_client, SID, "w1", 10_000)
    assert lease is not None and lease.fence == 10
    assert not await redis_client.exists(keys.legacy_fence(SID))


async def test_the_sweep_folds_a_legacy_fence_and_drops_fields_at_their_defaults(redis_client: aioredis.Redis) -> None:
    await _row(redis_client, **{keys.FENCE_FIELD: "2"})
    await redis_client.set(keys.legacy_fence(SID), 6)
    assert await dormancy.sweep_session(redis_client, SID) == 0
    row = {k.decode(): v.decode() for k, v in (await redis_client.hgetall(keys.session_row(SID))).items()}
    assert row[keys.FENCE_FIELD] == "6" and not await redis_client.exists(keys.legacy_fence(SID))
    assert "status" not in row and "variant" not in row  # dormant and base: SessionRow's defaults
    assert "id" not in row  # the key has it
    state = await load_state(redis_client, SID)
    assert state is not None and state.fence == 6 and state.row.id == SID
    assert state.row.status == "dormant" and state.row.variant == "base" and state.status() == "dormant"


async def test_the_sweep_keeps_a_variant_other_than_the_default(redis_client: aioredis.Redis) -> None:
    await _row(redis_client, variant="brand")
    assert await dormancy.sweep_session(redis_client, SID) == 0
    assert await redis_client.hget(keys.session_row(SID), "variant") == b"brand"


async def test_a_live_session_is_left_alone_by_the_sweep(redis_client: aioredis.Redis) -> None:
    await _row(redis_client)
    await redis_client.set(keys.legacy_fence(SID), 4)
    lease = await Lease.acquire(redis_client, SID, "w1", 10_000)
    assert lease is not None
    assert await dormancy.sweep_session(redis_client, SID) == -1
    assert await redis_client.hget(keys.session_row(SID), "status") == b"dormant"


async def test_a_row_holding_only_a_fence_is_no_session(redis_client: aioredis.Redis) -> None:
    # A lease taken for an id the proxy never created (the HINCRBY made the hash): not a session.
    lease = await Lease.acquire(redis_client, "s_no_row", "w1", 10_000)
    assert lease is not None and lease.fence == 1
    assert await load_state(redis_client, "s_no_row") is None


def test_fence_of_takes_the_larger_and_reads_missing_or_garbage_as_zero() -> None:
    assert fence_of(b"3", b"7") == 7 and fence_of("9", None) == 9 and fence_of(None, None) == 0
    assert fence_of(b"x", b"2") == 2
