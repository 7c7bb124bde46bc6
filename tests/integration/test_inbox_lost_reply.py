"""A lost XREADGROUP reply (shared/streams/stream_handed.py): Redis delivered the entries to the reader's
consumer, the reply never reached the client (a fault proxy drops it, then resets the connection).
The reader's next read hands those entries out from the consumer's pending list, once, and then
reads new entries again."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from shared.contracts.streams.inbox import UserPrompt
from shared.streams.inbox import InboxEntry, InboxReader, append
from tests.support.faultproxy import FaultProxy, proxy_for
from tests.support.pending_reads import blocked_reads, delivered_to
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(60)
READER_NAME = "lost-reply-reader"


def sid() -> str:
    return "s" + uuid.uuid4().hex[:10]


def prompt(session: str, text: str) -> UserPrompt:
    return UserPrompt(session_id=session, message=text)


@pytest.fixture
async def proxied(redis_url: str) -> AsyncIterator[tuple[FaultProxy, aioredis.Redis]]:
    """A client whose connections go through a fault proxy to the test's Redis."""
    proxy, url = proxy_for(redis_url, lifetime_s=55)
    client = aioredis.from_url(url, client_name=READER_NAME)  # its blocked read is told from any other
    try:
        yield proxy, client
    finally:
        await client.aclose()
        proxy.stop()


async def lose_the_next_reply(proxy: FaultProxy, direct: aioredis.Redis, reader: InboxReader, session: str,
                              text: str) -> str:
    """Appends an entry while the reader's blocking read is in flight with its reply muted; returns the
    entry's id once Redis has delivered it to the reader's consumer (its reply dropped), after the reset."""
    waiting = asyncio.ensure_future(reader.read(block_ms=10_000))
    await eventually(lambda: blocked_reads(direct, READER_NAME), timeout=10, what="the reader's XREADGROUP blocked in Redis")
    dropped = proxy.counters.bytes_dropped
    assert proxy.mute_replies() >= 1
    lost = await append(direct, prompt(session, text))

    async def delivered() -> bool:
        return lost in await delivered_to(direct, session, "worker-1")

    await eventually(delivered, timeout=10, what="the entry delivered to the reader's consumer")
    # Delivered is Redis's side; the proxy may not have the reply yet. Reset once it has dropped it: a
    # reset before would lose the reply too, but uncounted (the reply swallowed by the dead link).
    async def reply_dropped() -> bool:
        return proxy.counters.bytes_dropped > dropped

    await eventually(reply_dropped, timeout=10, what="the read's reply dropped")
    proxy.reset()
    with contextlib.suppress(RedisError, OSError):
        assert await asyncio.wait_for(waiting, 10) == []  # the read failed: its reply never arrived
    return lost


async def read_for(reader: InboxReader, want: int, timeout_s: float = 20.0) -> list[InboxEntry]:
    """What the reader hands out until `want` entries (bounded: the reconnect after a reset may fail a
    few reads first), then one more read: nothing may follow (nothing handed out twice)."""
    got: list[InboxEntry] = []
    deadline = asyncio.get_running_loop().time() + timeout_s
    while len(got) < want and asyncio.get_running_loop().time() < deadline:
        try:
            got += await reader.read(block_ms=200)
        except (RedisError, OSError):
            await asyncio.sleep(0.05)
    with contextlib.suppress(RedisError, OSError):
        got += await reader.read(block_ms=300)
    return got


async def test_a_reply_lost_to_a_reset_is_handed_out_once(redis_client: aioredis.Redis,
                                                         proxied: tuple[FaultProxy, aioredis.Redis]) -> None:
    proxy, client = proxied
    s = sid()
    reader = InboxReader(client, "worker-1")
    try:
        assert await reader.add(s) == []
        first = await append(redis_client, prompt(s, "before"))
        assert [e.entry_id for e in await read_for(reader, 1)] == [first]
        lost = await lose_the_next_reply(proxy, redis_client, reader, s, "lost")
        after = await append(redis_client, prompt(s, "after"))
        got = await read_for(reader, 2)
        assert [e.entry_id for e in got] == [lost, after]  # the lost one first, each once
        assert got[0].message.message == "lost"  # type: ignore[union-attr]
        assert proxy.counters.bytes_dropped > 0
    finally:
        await reader.close()


async def test_an_entry_claimed_from_a_stale_reader_is_not_handed_out_again(
        redis_client: aioredis.Redis, proxied: tuple[FaultProxy, aioredis.Redis]) -> None:
    """The holder claimed an entry a stale reader took (it is now in the holder's pending list, above
    what the holder read itself); the read after a lost reply hands out only the lost entry."""
    proxy, client = proxied
    s = sid()
    reader = InboxReader(client, "worker-1")
    stale = InboxReader(redis_client, "paused")
    try:
        assert await reader.add(s) == []
        mine = await append(redis_client, prompt(s, "mine"))
        assert [e.entry_id for e in await read_for(reader, 1)] == [mine]
        await stale.streams.add(s)  # a worker paused past its lease reads s without the wake's claim
        taken = await append(redis_client, prompt(s, "taken"))
        assert [e.entry_id for e in await read_for(stale, 1)] == [taken]
        claimed = await eventually(lambda: reader.claim_foreign([s], min_idle_ms=50), timeout=10,
                                   what="the stale reader's entry claimed")
        assert [e.entry_id for e in claimed] == [taken]
        lost = await lose_the_next_reply(proxy, redis_client, reader, s, "lost")
        assert [e.entry_id for e in await read_for(reader, 1)] == [lost]
        assert await delivered_to(redis_client, s, "worker-1") == {mine, taken, lost}  # none acked here
    finally:
        await reader.close()
        await stale.close()


async def test_a_wake_claim_is_not_handed_out_again_after_a_lost_reply(
        redis_client: aioredis.Redis, proxied: tuple[FaultProxy, aioredis.Redis]) -> None:
    """Entries claimed at the wake (an earlier holder's) are handed out by `add`; the read after a lost
    reply starts after them."""
    proxy, client = proxied
    s = sid()
    previous = InboxReader(redis_client, "dead-holder")
    await previous.add(s)
    left = await append(redis_client, prompt(s, "left pending by a dead holder"))
    assert [e.entry_id for e in await read_for(previous, 1)] == [left]
    await previous.close()
    reader = InboxReader(client, "worker-1")
    try:
        assert [e.entry_id for e in await reader.add(s)] == [left]
        lost = await lose_the_next_reply(proxy, redis_client, reader, s, "lost")
        assert [e.entry_id for e in await read_for(reader, 1)] == [lost]
    finally:
        await reader.close()
