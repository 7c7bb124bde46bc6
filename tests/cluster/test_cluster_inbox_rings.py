"""The runtime's inbox reads on a cluster (shared/streams/inbox_rings.py): rings, what covers a lost ring,
and a primary's failover.

The reader is built as the runtime builds it (a cluster client: rings by default). A long sweep
interval makes the ring (or the re-subscription) the only way an entry can arrive in time, so each
test shows which mechanism delivered it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import redis

from shared.contracts.streams.inbox import UserPrompt
from shared.redis import keys
from shared.redis.reconnect import connect, connect_blocking
from shared.redis.redis_wire import text
from shared.streams import inbox
from shared.streams.inbox import InboxEntry, InboxReader
from tests.cluster.conftest import start_cluster
from tests.support.faultproxy import FaultProxy
from tests.support.polling import eventually
from tests.support.redis_cluster import LocalCluster

NO_SWEEP_S = 3600.0  # the sweep never comes within a test


def prompt(sid: str, text: str) -> UserPrompt:
    return UserPrompt(session_id=sid, message=text)


async def read_until(reader: InboxReader, want: int, timeout_s: float) -> list[InboxEntry]:
    """Reads (backing off after a failure, as the worker does) until `want` entries or the timeout."""
    out: list[InboxEntry] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        try:
            out.extend(await reader.read(block_ms=200))
        except (redis.RedisError, OSError):
            await asyncio.sleep(0.2)
    return out


async def append_retrying(writer: redis.asyncio.Redis, message: UserPrompt) -> None:
    """As a producer does after a failover: the first append may meet a pooled connection to the dead
    primary (no 202 was given; the writer's next attempt finds the promoted replica)."""
    for attempt in range(10):
        try:
            await inbox.append(writer, message)
            return
        except (redis.ConnectionError, redis.TimeoutError):
            if attempt == 9:
                raise
            await asyncio.sleep(0.3)


@contextlib.asynccontextmanager
async def clients(url: str, sweep_s: float) -> AsyncIterator[tuple[redis.asyncio.Redis, InboxReader]]:
    writer, blocking = connect(url), connect_blocking(url, 1.0)
    reader = InboxReader(blocking, "reader-" + uuid.uuid4().hex[:6], sweep_interval_s=sweep_s)
    try:
        yield writer, reader
    finally:
        await reader.close()
        await writer.aclose()
        await blocking.aclose()


async def held(reader: InboxReader, count: int) -> list[str]:
    sids = [f"ring-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    for sid in sids:
        assert await reader.add(sid) == []
    assert await read_until(reader, 1, 1.0) == []  # subscribed; the first sweep found nothing
    return sids


async def test_a_ring_is_read_at_once_and_one_connection_serves_a_node(redis_url: str) -> None:
    async with clients(redis_url, NO_SWEEP_S) as (writer, reader):
        assert reader.rings is not None
        sids = await held(reader, 60)
        await inbox.append(writer, prompt(sids[7], "rung"))
        got = await read_until(reader, 1, 20.0)  # read at all: the sweep (an hour away) never would
        assert [(e.session_id, getattr(e.message, "message", None)) for e in got] == [(sids[7], "rung")]
        # 60 sessions over three primaries: three subscriptions, not one blocked read per session.
        assert reader.rings.connections == 3
        assert reader.rings.stats.rings >= 1


async def test_a_lost_ring_is_recovered_by_the_sweep(redis_url: str) -> None:
    async with clients(redis_url, 0.5) as (writer, reader):
        assert reader.rings is not None
        sids = await held(reader, 5)
        sweeps = reader.rings.stats.sweeps
        # An append whose ring never went out (a writer that died between XADD and SPUBLISH).
        await inbox.append(writer, prompt(sids[2], "silent"), ring=False)
        got = await read_until(reader, 1, 3.0)
        assert [(e.session_id, getattr(e.message, "message", None)) for e in got] == [(sids[2], "silent")]
        assert reader.rings.stats.sweeps > sweeps
    async with clients(redis_url, NO_SWEEP_S) as (writer, reader):
        sids = await held(reader, 5)
        await inbox.append(writer, prompt(sids[2], "silent"), ring=False)
        assert await read_until(reader, 1, 1.5) == []  # without the sweep nothing would find it


async def test_rings_lost_while_unsubscribed_are_read_on_resubscribe(redis_url: str, redis_cluster: LocalCluster) -> None:
    async with clients(redis_url, NO_SWEEP_S) as (writer, reader):
        assert reader.rings is not None
        sids = await held(reader, 30)
        for port in redis_cluster.primaries():  # every subscription connection dropped
            with contextlib.closing(redis_cluster.client(port)) as c:
                c.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        for sid in sids:  # rung while nobody may be listening
            await inbox.append(writer, prompt(sid, "while away"))
        got = await read_until(reader, len(sids), 10.0)
        assert sorted(e.session_id for e in got) == sorted(sids)
        assert reader.rings.stats.dropped_nodes >= 1


async def test_a_silent_subscription_is_pinged_dropped_and_subscribed_again(
    redis_url: str, redis_cluster: LocalCluster
) -> None:
    """A node that stops answering without closing the connection (frozen, or a half-open TCP
    connection): its PING goes unanswered, the connection is dropped and the sessions subscribed again."""
    async with clients(redis_url, NO_SWEEP_S) as (writer, reader):
        assert reader.rings is not None
        reader.rings._keepalive_s, reader.rings._pong_timeout_s = 0.2, 0.5
        sids = await held(reader, 30)
        port = redis_cluster.primaries()[0]
        with contextlib.closing(redis_cluster.client(port)) as c:
            c.execute_command("CLIENT", "PAUSE", "1500", "ALL")  # every client of that node left waiting
        assert await read_until(reader, 1, 1.4) == []
        assert reader.rings.stats.dropped_nodes >= 1, "the silent node was never dropped"
        await asyncio.sleep(0.3)  # the pause is over
        for sid in sids:
            await inbox.append(writer, prompt(sid, "after the pause"))
        got = await read_until(reader, len(sids), 10.0)
        assert sorted(e.session_id for e in got) == sorted(sids)
        assert reader.rings.connections == 3


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_killed_primary_strands_no_session() -> None:
    own = start_cluster()  # never the shared one: this test kills a node
    try:
        async with clients(own.url, NO_SWEEP_S) as (writer, reader):
            assert reader.rings is not None
            sids = await held(reader, 30)
            victim = own.primary_of(keys.inbox(sids[0]))
            on_victim = [sid for sid in sids if own.primary_of(keys.inbox(sid)) == victim]
            own.wait_replicas_synced()
            await writer.exists(keys.inbox(sids[0]))  # the writer learns every node: the URL's may be the victim
            own.kill(victim)
            # The sessions on the other primaries are served while the victim's replica is promoted.
            healthy = next(sid for sid in sids if sid not in on_victim)
            started = time.monotonic()
            await inbox.append(writer, prompt(healthy, "during the outage"))
            got = await read_until(reader, 1, 5.0)
            assert [e.session_id for e in got] == [healthy], "a healthy node's session waited for the failover"
            outage_read_s = time.monotonic() - started
            # The reader keeps reading through the outage, as the worker's loop does.
            promoted = asyncio.get_running_loop().run_in_executor(None, own.wait_ok, 60.0)
            while not promoted.done():
                assert await read_until(reader, 1, 0.5) == []
            await promoted
            for sid in sids:
                await append_retrying(writer, prompt(sid, "after failover"))
            got = await read_until(reader, len(sids), 30.0)
            assert sorted(e.session_id for e in got) == sorted(sids), f"stranded: {set(sids) - {e.session_id for e in got}}"
            assert on_victim and reader.rings.stats.dropped_nodes >= 1
            assert reader.rings.connections == 3
            print(f"healthy session read {outage_read_s:.3f}s into the outage; {len(on_victim)} sessions moved")
    finally:
        own.stop()


async def test_a_ring_read_reply_lost_to_a_reset_is_handed_out_once(redis_url: str, redis_cluster: LocalCluster) -> None:
    """Redis delivered the rung session's entry to the reader's consumer, the reply never reached the
    reader (every node behind a fault proxy that drops replies, then resets): the next read of that
    session hands it out from the consumer's pending list (shared/streams/stream_handed.py), once."""
    proxies = {port: FaultProxy("127.0.0.1", port, lifetime_s=55).start() for port in redis_cluster.ports}
    writer = connect(redis_url)
    blocking = connect_blocking(redis_url, 1.0, address_remap=lambda a: ("127.0.0.1", proxies[a[1]].port))
    reader = InboxReader(blocking, "reader-" + uuid.uuid4().hex[:6], sweep_interval_s=0.3)
    try:
        sid = (await held(reader, 1))[0]
        before = await inbox.append(writer, prompt(sid, "before"))
        assert [e.entry_id for e in await read_until(reader, 1, 5.0)] == [before]
        for proxy in proxies.values():
            proxy.mute_replies()  # the ring and the read's reply are both dropped: the sweep reads it
        reading = asyncio.ensure_future(read_until(reader, 2, 20.0))
        lost = await inbox.append(writer, prompt(sid, "lost"))

        async def delivered() -> bool:
            detail = await writer.xpending_range(keys.inbox(sid), inbox.GROUP, "-", "+", 10)
            return lost in {text(p["message_id"]) for p in detail}

        await eventually(delivered, timeout=10, what="the entry delivered to the reader's consumer")
        for proxy in proxies.values():
            proxy.reset()
        after = await inbox.append(writer, prompt(sid, "after"))
        assert [e.entry_id for e in await reading] == [lost, after]
        assert await read_until(reader, 1, 1.0) == []  # and nothing a second time
    finally:
        await reader.close()
        await writer.aclose()
        await blocking.aclose()
        for proxy in proxies.values():
            proxy.stop()
