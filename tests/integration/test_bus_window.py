"""`window` (shared/streams/bus_window.py): a sliding window of entries in flight instead of a batch that
waits for its slowest entry, against a real Redis: a slow entry holds only its own slot, each key's
entries still run in stream order, an entry is acked only once its handler returned, and a consumer
killed mid-handler leaves its entries to another's claimer."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import redis.asyncio as aioredis
from structlog.testing import capture_logs

from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.streams.bus import by_session, ensure_group, publish
from tests.integration.test_bus import (
    ConsumerProc,
    _started,
    _true,
    _zero,
    consumer,
    new_stream,
    pending,
    procs,  # noqa: F401 - the fixture
    producer,
)
from tests.integration.test_bus_order_key import publish_rounds
from tests.support.polling import eventually


async def test_a_slow_entry_does_not_hold_back_the_next_reads(redis_url: str, redis_client: aioredis.Redis) -> None:
    stream = new_stream()
    release = asyncio.Event()
    calls: list[str] = []

    async def handle(wake: Wake) -> None:
        calls.append(wake.session_id)
        if wake.session_id == "slow":
            await release.wait()

    async with producer(redis_url) as pub, consumer(redis_url, redis_client, stream, handle, order_key=by_session,
                                                    window=4, batch_size=2):
        await publish(pub, stream, Wake(session_id="slow"))
        await eventually(lambda: _true(calls == ["slow"]), what="the slow entry to start")
        for i in range(10):  # five reads of two: a batch would wait for "slow" after the first
            await publish(pub, stream, Wake(session_id=f"s{i}"))
        await eventually(lambda: _true(len(calls) == 11), what="the entries after the slow one")
        assert await pending(redis_client, stream) == 1  # acked as each finished; "slow" still runs
        release.set()
        await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
    assert calls == ["slow", *(f"s{i}" for i in range(10))]


async def test_each_key_in_stream_order_and_never_more_than_the_window(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    stream = new_stream()
    await publish_rounds(redis_url, stream, ["a", "b", "c", "d", "e", "f"], rounds=5)
    calls: list[str] = []
    running: set[str] = set()
    most = 0

    async def handle(wake: Wake) -> None:
        nonlocal most
        assert wake.session_id not in running  # one entry of a key at a time
        running.add(wake.session_id)
        most = max(most, len(running))
        await asyncio.sleep(0.01 * (1 + ord(wake.session_id) % 3))
        running.discard(wake.session_id)
        calls.append(wake.wake_id)

    async with consumer(redis_url, redis_client, stream, handle, order_key=by_session, window=3, batch_size=1):
        await eventually(lambda: _true(len(calls) == 30), what="all 30 entries")
        await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
    for sid in "abcdef":
        assert [c for c in calls if c.startswith(f"w_{sid}")] == [f"w_{sid}{n}" for n in range(5)]
    assert most == 3


async def test_acked_only_after_the_handler_returned(redis_url: str, redis_client: aioredis.Redis) -> None:
    stream = new_stream()
    gates = {f"s{i}": asyncio.Event() for i in range(3)}
    started: list[str] = []
    seen: list[tuple[str, int]] = []

    async def handle(wake: Wake) -> None:
        started.append(wake.session_id)
        await gates[wake.session_id].wait()
        seen.append((wake.session_id, await pending(redis_client, stream)))

    async with producer(redis_url) as pub, consumer(redis_url, redis_client, stream, handle, order_key=by_session,
                                                    window=3, batch_size=1):
        for sid in gates:
            await publish(pub, stream, Wake(session_id=sid))
        await eventually(lambda: _true(len(started) == 3), what="three in flight")
        assert await pending(redis_client, stream) == 3
        gates["s1"].set()
        await eventually(lambda: _pending_is(redis_client, stream, 2), what="s1's ack")
        gates["s0"].set()
        gates["s2"].set()
        await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
    # Each handler saw its own entry still pending: the ack came after it returned.
    assert seen[0] == ("s1", 3)


async def _pending_is(client: aioredis.Redis, stream: str, n: int) -> bool:
    return await pending(client, stream) == n


async def test_a_failure_is_reclaimed_and_holds_back_only_its_key(redis_url: str, redis_client: aioredis.Redis) -> None:
    stream = new_stream()
    await publish_rounds(redis_url, stream, ["a", "b"], rounds=3)
    calls: list[str] = []

    async def handle(wake: Wake) -> None:
        calls.append(wake.wake_id)
        if wake.wake_id == "w_a0" and calls.count("w_a0") == 1:
            raise RuntimeError("first attempt fails")

    with capture_logs():
        async with consumer(redis_url, redis_client, stream, handle, claim_idle_ms=500, order_key=by_session,
                            window=4, batch_size=1):
            await eventually(lambda: _true(len(calls) == 7), what="the retry of a's entries")
            await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
    assert [c for c in calls if c.startswith("w_b")] == ["w_b0", "w_b1", "w_b2"]
    # a1 and a2 did not overtake a0: left pending behind it, the claimer retries the three in order.
    assert [c for c in calls if c.startswith("w_a")] == ["w_a0", "w_a0", "w_a1", "w_a2"]
    assert await redis_client.xlen(keys.DEADLETTER) == 0


async def test_killed_mid_window_the_entries_are_reclaimed_and_each_effect_happens_once(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path, procs: list[ConsumerProc],  # noqa: F811
) -> None:
    stream, prefix = new_stream(), f"gamma:test:{uuid.uuid4().hex[:8]}"
    await ensure_group(redis_client, stream, "faulty")
    sent = [Wake(session_id=f"s{i}") for i in range(6)]
    first = ConsumerProc(redis_url, stream, prefix, tmp_path / "first.log", "--hang", "after", "--window", "4")
    procs.append(first)
    await eventually(lambda: redis_client.lrange(f"{prefix}:ready", 0, -1), what="the first consumer")
    async with producer(redis_url) as pub:
        for wake in sent:
            await publish(pub, stream, wake)
    await eventually(lambda: _started_n(redis_client, prefix, 4), what="a full window")
    assert await _started(redis_client, prefix, first.proc.pid)
    first.proc.send_signal(signal.SIGKILL)
    assert first.proc.wait(timeout=30) == -signal.SIGKILL
    assert await pending(redis_client, stream, "faulty") == 4  # the window: the two others unread

    second = ConsumerProc(redis_url, stream, prefix, tmp_path / "second.log", "--window", "4")
    procs.append(second)
    await eventually(lambda: _zero(pending(redis_client, stream, "faulty")), timeout=30, what="the reclaim")
    effects = await redis_client.lrange(f"{prefix}:effects", 0, -1)
    assert sorted(effects) == sorted(w.wake_id.encode() for w in sent)  # each once
    assert await redis_client.xlen(keys.DEADLETTER) == 0


async def _started_n(client: aioredis.Redis, prefix: str, n: int) -> bool:
    return await client.llen(f"{prefix}:started") >= n


async def test_sigterm_finishes_the_window_in_flight(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path, procs: list[ConsumerProc],  # noqa: F811
) -> None:
    stream, prefix = new_stream(), f"gamma:test:{uuid.uuid4().hex[:8]}"
    proc = ConsumerProc(redis_url, stream, prefix, tmp_path / "c.log", "--work-s", "1.5", "--window", "3")
    procs.append(proc)
    await eventually(lambda: redis_client.lrange(f"{prefix}:ready", 0, -1), what="the consumer")
    sent = [Wake(session_id=f"s{i}") for i in range(5)]
    async with producer(redis_url) as pub:
        for wake in sent:
            await publish(pub, stream, wake)
    await eventually(lambda: _started_n(redis_client, prefix, 3), what="a full window")
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.proc.wait(timeout=40) == 0
    # The three in flight finished and were acked before the broker stopped; the two unread stay.
    assert len(await redis_client.lrange(f"{prefix}:effects", 0, -1)) == 3
    assert await pending(redis_client, stream, "faulty") == 0
    assert await redis_client.xlen(stream) == 5
