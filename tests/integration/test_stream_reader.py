"""shared/streams/stream_reader.py against a real Redis: a read waiting while its only stream goes away and
another joins must not wait forever (the proxy fan-out's SSE clients come and go like this)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from shared.streams.stream_reader import StreamEntry, StreamReader


def stream(name: str) -> str:
    return f"reader-test:{name}"


async def read_until(reader: StreamReader, want: int) -> list[StreamEntry]:
    got: list[StreamEntry] = []
    while len(got) < want:
        got += await reader.read(200, 10)
    return got


@pytest.mark.timeout(30)
async def test_a_stream_joining_after_the_last_one_left_is_read(redis_client: aioredis.Redis) -> None:
    reader = StreamReader(redis_client, stream)
    try:
        await reader.add("a", "0-0")
        waiting = asyncio.ensure_future(reader.read(60_000, 10))  # a block far beyond the test's timeout
        await asyncio.sleep(0)  # the read has asked its shard, whose task has not sent the XREAD yet
        reader.remove("a")  # the last client of "a" went away meanwhile
        await asyncio.sleep(0.1)  # the shard's task sees no stream left and ends
        await reader.add("b", "0-0")  # another session's client arrives
        await redis_client.xadd(stream("b"), {"data": "hello"})
        first = await asyncio.wait_for(waiting, 10)  # returns (nothing of its own) instead of waiting on
        got = first + await asyncio.wait_for(read_until(reader, 1 - len(first)), 10)
        assert [(e.name, e.fields[b"data"]) for e in got] == [("b", b"hello")]
    finally:
        await reader.close()
