"""Event streams share one Redis read per shard of sessions, and a user has a cap.

Before: one blocked XREAD (one Redis connection) per SSE client; at 540 streams requests failed with
"No connection available" and GET /sessions/{id} took 5.4 s. Now the proxy's fan-out reads the
watched sessions' streams in shards of 32 on one connection each and feeds bounded per-client queues;
a client that does not keep up is closed; Last-Event-ID replays from the stream and joins the live
feed without gap or duplicate; a user past GAMMA_SSE_MAX_STREAMS_PER_USER gets 429.

The proxy runs alone (events are XADDed the way the runtime's outbox writes them).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from shared.redis import keys
from tests.hostile.sse_client import SseClient, open_sse
from tests.support.polling import eventually
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}
CAP = 205
QUEUE = 50


@pytest.fixture(scope="module")
def proxy(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("sse"),
                  env_overrides={"GAMMA_SSE_MAX_STREAMS_PER_USER": str(CAP), "GAMMA_SSE_QUEUE_SIZE": str(QUEUE),
                                 "GAMMA_SSE_HEARTBEAT_S": "2"})
    try:
        stack.start("proxy")
        yield stack
    finally:
        stack.stop()


def new_session(proxy: Stack) -> str:
    return str(httpx.post(proxy.url() + "/sessions", headers=ALICE, timeout=10).json()["id"])


def connected_clients(r: redis.Redis) -> int:
    return int(r.info("clients")["connected_clients"])


def blocked_reads(r: redis.Redis) -> list[dict[str, object]]:
    return [c for c in r.client_list() if c.get("cmd") == "xread" and "b" in str(c.get("flags", ""))]


async def latencies(proxy: Stack, sid: str, n: int) -> list[float]:
    out: list[float] = []
    async with httpx.AsyncClient(base_url=proxy.url(), headers=ALICE, timeout=30) as api:
        for _ in range(n):
            started = time.monotonic()
            assert (await api.get(f"/sessions/{sid}")).status_code == 200
            out.append(time.monotonic() - started)
    return out


@pytest.mark.timeout(120)
def test_200_idle_streams_need_no_connection_each_and_the_cap_answers_429(proxy: Stack, r: redis.Redis) -> None:
    sids = [new_session(proxy) for _ in range(40)]
    port = proxy.ports["proxy"]

    async def scenario() -> None:
        before = connected_clients(r)
        clients: list[SseClient] = []
        for batch in range(20):  # ten at a time: a burst of 200 requests would grow the command pool by itself
            opened = await asyncio.gather(*(open_sse(port, sids[(batch * 10 + i) % 40]) for i in range(10)))
            await asyncio.gather(*(c.collect(wait_s=10, until_comments=1) for c in opened))  # "connected"
            clients += opened
        assert {c.status for c in clients} == {200}
        during, blocked = connected_clients(r), len(blocked_reads(r))
        took = await latencies(proxy, sids[0], 20)
        print(f"\n200 idle SSE clients on 40 sessions: connected_clients {before} -> {during}, blocked XREADs "
              f"{blocked}; GET /sessions/{{id}} median {statistics.median(took) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms")
        assert blocked <= 2, f"{blocked} blocked reads for 40 sessions"  # one per shard of 32
        # Not one per client (200): the command pool grows with a burst's requests in flight at once (ten
        # here, each reading its row and replay; with no thread hop before the handler they all reach
        # Redis together: 20 seen), plus the shards' blocked reads.
        assert during - before <= 32, f"{during - before} Redis connections for 200 SSE clients"
        # Both shards deliver: one event per session reaches each of its five clients, and only those.
        sent = {sid: add_events(r, sid, 1)[0] for sid in sids}
        await asyncio.gather(*(c.collect(wait_s=15, until_ids=1) for c in clients))
        assert all(c.ids == [sent[sids[i % 40]]] for i, c in enumerate(clients))
        assert len(took) == 20  # answered while 200 streams are open; their cost per client is bench-stream's

        clients += await asyncio.gather(*(open_sse(port, sids[0]) for _ in range(CAP - 200)))
        assert {c.status for c in clients} == {200}
        refused = await open_sse(port, sids[1])
        assert refused.status == 429
        body = await refused.reader.read(4000)
        assert b"at most 205 per user" in body
        refused.close()
        # Closing a stream frees its place (noticed at the latest by the next heartbeat's write).
        clients.pop().close()
        async def reopened() -> SseClient | None:
            again = await open_sse(port, sids[1])
            if again.status == 200:
                return again
            again.close()
            return None
        clients.append(await eventually(reopened, timeout=10, interval=0.5, what="a stream's place freed"))
        for c in clients:
            c.close()

    asyncio.run(scenario())


def add_events(r: redis.Redis, sid: str, n: int, size: int = 40) -> list[str]:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(keys.events(sid), {"data": f'{{"n": {i}, "pad": "{"x" * size}"}}'})
    return [i.decode() for i in pipe.execute()]


@pytest.mark.timeout(120)
def test_replay_joins_the_live_feed_without_gap_or_duplicate(proxy: Stack, r: redis.Redis) -> None:
    sid = new_session(proxy)
    port = proxy.ports["proxy"]
    first = add_events(r, sid, 300)

    async def scenario() -> tuple[list[str], list[SseClient]]:
        later: list[str] = []

        async def append_meanwhile() -> None:
            for _ in range(20):
                later.extend(await asyncio.to_thread(add_events, r, sid, 10))
                await asyncio.sleep(0.02)

        writer = asyncio.ensure_future(append_meanwhile())
        clients = list(await asyncio.gather(open_sse(port, sid, last_event_id=first[99]), open_sse(port, sid, "0"),
                                            open_sse(port, sid, "$"), open_sse(port, sid, last_event_id=first[-1])))
        await writer
        total = len(first) + len(later)
        wanted = [total - 100, total, None, total - 300]
        await asyncio.gather(*(c.collect(wait_s=20, until_ids=n) for c, n in zip(clients, wanted, strict=True)
                               if n is not None))
        await asyncio.sleep(1.0)  # anything extra (a duplicate) would have arrived by now
        for c in clients:
            await c.collect(wait_s=0.5)
            c.close()
        return first + later, clients

    everything, (after_99, from_zero, from_newest, after_last) = asyncio.run(scenario())
    assert len(everything) == 500
    assert after_99.ids == everything[100:]
    assert from_zero.ids == everything
    assert after_last.ids == everything[300:]
    # "$": everything after the newest entry when it connected, a contiguous tail.
    assert from_newest.ids and from_newest.ids == everything[everything.index(from_newest.ids[0]):]


@pytest.mark.timeout(120)
def test_a_client_that_stops_reading_is_closed_and_the_others_get_everything(proxy: Stack, r: redis.Redis) -> None:
    sid = new_session(proxy)
    port = proxy.ports["proxy"]

    async def scenario() -> tuple[SseClient, SseClient, list[str]]:
        # The slow client's buffers fixed (64 KiB of socket, 512 KiB of reader): with the kernel's
        # autotuning the 19 MB sent below could fit in them and the proxy would never see it lag.
        slow = await open_sse(port, sid, "$", rcvbuf=64 * 1024, limit=256 * 1024)
        fast = await open_sse(port, sid, "$")
        await asyncio.gather(slow.collect(wait_s=10, until_comments=1), fast.collect(wait_s=10, until_comments=1))
        ids: list[str] = []
        reading = asyncio.ensure_future(fast.collect(wait_s=60, until_ids=300))
        for _ in range(30):  # 300 x 64 KiB: far more than the slow client's buffers and its mailbox hold
            ids += await asyncio.to_thread(add_events, r, sid, 10, 64 * 1024)
            await asyncio.sleep(0.05)
        await reading
        await slow.collect(wait_s=20)  # now it reads: what was buffered, then the end of the stream
        fast.close()
        slow.close()
        return slow, fast, ids

    slow, fast, ids = asyncio.run(scenario())
    r.delete(keys.events(sid))
    assert fast.ids == ids
    assert slow.ended and len(slow.ids) < len(ids), f"the slow client got {len(slow.ids)} of {len(ids)}"
    assert slow.ids == ids[: len(slow.ids)]
    assert "closed (slow_client)" in slow.comments
    assert '"reason": "slow_client"' in proxy.log("proxy")
