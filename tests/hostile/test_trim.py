"""`shared.streams.trim` against a real Redis: a stream is trimmed only below what every group has read and
acked, never while an expected group is missing, and a session inbox only once its group exists."""

from __future__ import annotations

import redis.asyncio as aioredis

from shared.redis import keys
from shared.streams.trim import trim_acked, trim_all


async def test_trim_keeps_everything_some_group_has_not_read_or_acked(redis_client: aioredis.Redis) -> None:
    stream = "gamma:test:trim"
    ids = [await redis_client.xadd(stream, {"i": str(i)}) for i in range(10)]
    assert await trim_acked(redis_client, stream, ["a", "b"]) == -1  # no group yet: nothing is known
    await redis_client.xgroup_create(stream, "a", id="0")
    assert await trim_acked(redis_client, stream, ["a", "b"]) == -1  # group b not created yet
    await redis_client.xgroup_create(stream, "b", id="0")
    assert await trim_acked(redis_client, stream, ["a", "b"]) == 0  # nobody read anything

    await redis_client.xreadgroup("a", "c1", {stream: ">"}, count=6)
    await redis_client.xack(stream, "a", *ids[:6])
    assert await trim_acked(redis_client, stream, ["a", "b"]) == 0  # b has read nothing

    await redis_client.xreadgroup("b", "c1", {stream: ">"}, count=8)
    await redis_client.xack(stream, "b", *ids[:3], ids[5])  # 3, 4, 6, 7 stay pending in b
    assert await trim_acked(redis_client, stream, ["a", "b"]) == 3
    assert [e for e, _ in await redis_client.xrange(stream)] == ids[3:]

    await redis_client.xack(stream, "b", *ids[3:8])
    await redis_client.xreadgroup("a", "c1", {stream: ">"})
    await redis_client.xack(stream, "a", *ids[6:])
    assert await trim_acked(redis_client, stream, ["a", "b"]) == 5  # b read up to 7: 8 and 9 stay
    assert [e for e, _ in await redis_client.xrange(stream)] == ids[8:]


async def test_inboxes_are_trimmed_once_their_group_exists(redis_client: aioredis.Redis) -> None:
    held, fresh = keys.inbox("s_held"), keys.inbox("s_fresh")
    for stream in (held, fresh):
        for i in range(3):
            await redis_client.xadd(stream, {"i": str(i)})
    await redis_client.xgroup_create(held, keys.RUNTIME_GROUP, id="0")
    read = await redis_client.xreadgroup(keys.RUNTIME_GROUP, "w", {held: ">"})
    entries = read[0][1] if isinstance(read, list) else read[held.encode()][0]
    await redis_client.xack(held, keys.RUNTIME_GROUP, *[e for e, _ in entries])
    assert await trim_all(redis_client, [held, fresh, keys.inbox("s_none")]) == {held: 3, fresh: -1,
                                                                                 keys.inbox("s_none"): -1}
    assert await redis_client.xlen(held) == 0 and await redis_client.xlen(fresh) == 3
