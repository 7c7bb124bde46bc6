"""shared/streams/bus.py against a real Redis: backlog, reclaim after SIGKILL, delivery cap, validation,
graceful shutdown. Fault tests run the consumer as a real process (tests/support/bus_consumer.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from faststream.redis import RedisBroker
from structlog.testing import capture_logs

from shared.contracts.streams.deadletter import DeadLetter
from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.streams.bus import ensure_group, make_broker, publish, subscribe
from tests.support.pending_reads import blocked_reads
from tests.support.polling import eventually

REPO = Path(__file__).resolve().parents[2]
GROUP = "g"


def new_stream() -> str:
    return f"gamma:test:{uuid.uuid4().hex[:8]}"


async def pending(client: aioredis.Redis, stream: str, group: str = GROUP) -> int:
    return int((await client.xpending(stream, group))["pending"])


async def dead_letters(client: aioredis.Redis) -> list[DeadLetter]:
    entries = await client.xrange(keys.DEADLETTER)
    return [DeadLetter.model_validate_json(fields[b"data"]) for _, fields in entries]


@asynccontextmanager
async def consumer(
    redis_url: str, client: aioredis.Redis, stream: str, handler: Callable[[Wake], Awaitable[None]],
    name: str = "c1", **kw: Any
) -> AsyncIterator[RedisBroker]:
    broker = make_broker(redis_url)
    subscribe(broker, client, stream=stream, group=GROUP, consumer=name, model=Wake, handler=handler, **kw)
    await ensure_group(client, stream, GROUP)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@asynccontextmanager
async def producer(redis_url: str) -> AsyncIterator[RedisBroker]:
    broker = make_broker(redis_url)
    await broker.connect()
    try:
        yield broker
    finally:
        await broker.stop()


async def test_group_created_at_zero_sees_entries_published_before_the_consumer(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    stream = new_stream()
    sent = [Wake(session_id=f"s{i}") for i in range(3)]
    async with producer(redis_url) as pub:
        for wake in sent:
            await publish(pub, stream, wake)
    seen: list[str] = []

    async def handle(wake: Wake) -> None:
        seen.append(wake.wake_id)

    async with consumer(redis_url, redis_client, stream, handle):
        await eventually(lambda: _true(len(seen) == 3), what="the backlog")
        assert seen == [w.wake_id for w in sent]
        await eventually(lambda: _zero(pending(redis_client, stream)), what="acks")
    # ensure_group is idempotent: a second call on an existing group neither fails nor resets it.
    await ensure_group(redis_client, stream, GROUP)
    groups = await redis_client.xinfo_groups(stream)
    assert [g["name"] for g in groups] == [GROUP.encode()]
    assert groups[0]["last-delivered-id"] != b"0-0"


async def test_poison_entry_is_dead_lettered_after_the_cap_and_the_consumer_goes_on(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    stream = new_stream()
    attempts: dict[str, int] = {}
    done: list[str] = []

    async def handle(wake: Wake) -> None:
        attempts[wake.session_id] = attempts.get(wake.session_id, 0) + 1
        if wake.session_id == "poison":
            raise RuntimeError("this entry always fails")
        done.append(wake.session_id)

    poison = Wake(session_id="poison")
    async with producer(redis_url) as pub, consumer(
        redis_url, redis_client, stream, handle, claim_idle_ms=300, max_deliveries=3
    ):
        with capture_logs() as logs:
            poison_id = await publish(pub, stream, poison)
            for i in range(3):
                await publish(pub, stream, Wake(session_id=f"ok{i}"))
            await eventually(lambda: _true(len(done) == 3), what="the entries after the poison one")
            letters = await eventually(lambda: dead_letters(redis_client), timeout=30, what="a dead letter")
            await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")

    assert done == ["ok0", "ok1", "ok2"]
    assert attempts["poison"] == 3  # the handler ran max_deliveries times, no more
    [letter] = letters
    assert (letter.stream, letter.group, letter.entry_id) == (stream, GROUP, poison_id)
    assert letter.error == "delivery cap reached"
    assert letter.deliveries == 4
    assert json.loads(letter.fields["__body__"]) == poison.model_dump(mode="json")  # readable for operators
    assert "__data__" in letter.fields  # and the original field, as stored
    assert any(e["event"] == "dead_letter" and e["entry_id"] == poison_id for e in logs)


async def test_invalid_entry_is_dead_lettered_at_once_with_a_clear_log_line(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    stream = new_stream()
    handled: list[str] = []

    async def handle(wake: Wake) -> None:
        handled.append(wake.session_id)

    async with producer(redis_url) as pub, consumer(redis_url, redis_client, stream, handle, claim_idle_ms=60_000):
        with capture_logs() as logs:
            bad_envelope = await pub.publish({"session_id": "s1", "reason": "not-a-reason"}, stream=stream)
            bad_plain = await redis_client.xadd(stream, {"data": "{not json"})
            await publish(pub, stream, Wake(session_id="after"))
            await eventually(lambda: _true(handled == ["after"]), what="the valid entry after the bad ones")
            letters = await eventually(
                lambda: _len(dead_letters(redis_client), 2), what="two dead letters"
            )
            await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")

    by_id = {letter.entry_id: letter for letter in letters}
    assert set(by_id) == {bad_envelope.decode(), bad_plain.decode()}
    for letter in letters:
        assert letter.deliveries == 1  # at once, not after the cap
        assert letter.error.startswith("invalid entry:")
    assert "reason" in by_id[bad_envelope.decode()].error
    errors = [e for e in logs if e["event"] == "dead_letter"]
    assert {e["entry_id"] for e in errors} == set(by_id)
    assert all(e["log_level"] == "error" and e["stream"] == stream and "invalid entry" in e["error"] for e in errors)


async def test_failing_handler_is_retried_by_the_claimer(redis_url: str, redis_client: aioredis.Redis) -> None:
    stream = new_stream()
    calls: list[int] = []

    async def handle(wake: Wake) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("transient")

    async with producer(redis_url) as pub, consumer(redis_url, redis_client, stream, handle, claim_idle_ms=300):
        await publish(pub, stream, Wake(session_id="s"))
        await eventually(lambda: _true(len(calls) == 2), what="the retry")
        await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
    assert await redis_client.xlen(keys.DEADLETTER) == 0


@pytest.mark.parametrize("batch_size", [1, 100])
async def test_a_burst_read_one_at_a_time_spreads_over_the_consumers(
    redis_url: str, redis_client: aioredis.Redis, batch_size: int
) -> None:
    """The runtime's wakes (batch_size 1): a burst of costly entries goes to whichever consumer is
    free, not all to the one whose read came first. With batches of 100 a consumer busy with its
    first entry finds the rest of the burst waiting and takes it all in its next read."""
    stream = new_stream()
    handled: dict[str, list[str]] = {"c1": [], "c2": []}

    def handler(name: str) -> Callable[[Wake], Awaitable[None]]:
        async def handle(wake: Wake) -> None:
            handled[name].append(wake.session_id)
            await asyncio.sleep(0.05)  # a wake: lease, disk, restore
        return handle

    async with (producer(redis_url) as pub,
                consumer(redis_url, redis_client, stream, handler("c1"), "c1", batch_size=batch_size),
                consumer(redis_url, redis_client, stream, handler("c2"), "c2", batch_size=batch_size)):
        # Both consumers reading before the burst (a fixed wait was too short on a loaded machine).
        await eventually(lambda: _at_least(blocked_reads(redis_client), 2), what="both consumers' reads blocked")
        for i in range(12):
            await publish(pub, stream, Wake(session_id=f"s{i}"))
        await eventually(lambda: _true(sum(map(len, handled.values())) == 12), what="the burst handled")
    counts = sorted(len(v) for v in handled.values())
    if batch_size == 1:
        assert counts[0] >= 4, handled
    else:
        assert counts[0] <= 3, handled  # what bench-workers saw: one worker took the burst


async def test_a_failure_inside_a_batch_leaves_only_that_entry_pending(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    """Entries published before the consumer starts arrive in one batched read: the others are
    handled and acked, the failing one alone stays pending and is retried by the claimer."""
    stream = new_stream()
    sent = [Wake(session_id=f"s{i}") for i in range(5)]
    async with producer(redis_url) as pub:
        for wake in sent:
            await publish(pub, stream, wake)
    calls: list[str] = []

    async def handle(wake: Wake) -> None:
        calls.append(wake.session_id)
        if wake.session_id == "s2" and calls.count("s2") == 1:
            raise RuntimeError("first attempt fails")

    with capture_logs() as logs:
        async with consumer(redis_url, redis_client, stream, handle, claim_idle_ms=500):
            await eventually(lambda: _true(len(calls) == 6), what="the retry of s2")
            await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
    assert calls == ["s0", "s1", "s2", "s3", "s4", "s2"]
    failed = [e for e in logs if e["event"] == "handler_failed"]
    assert len(failed) == 1 and "first attempt fails" in failed[0]["error"]
    assert await redis_client.xlen(keys.DEADLETTER) == 0


async def test_a_slow_batch_keeps_its_entries_from_the_claimer(redis_url: str, redis_client: aioredis.Redis) -> None:
    """Entries waiting behind a slow handler in the same batch outlast the claim idle time; the
    reader keeps them fresh, so the claimer does not hand them out a second time."""
    stream = new_stream()
    sent = [Wake(session_id=f"s{i}") for i in range(4)]
    async with producer(redis_url) as pub:
        for wake in sent:
            await publish(pub, stream, wake)
    calls: list[str] = []

    async def handle(wake: Wake) -> None:
        calls.append(wake.session_id)
        await asyncio.sleep(0.5)

    async with consumer(redis_url, redis_client, stream, handle, claim_idle_ms=700):
        await eventually(lambda: _true(len(calls) >= 4), what="the batch")
        await eventually(lambda: _zero(pending(redis_client, stream)), what="an empty PEL")
        await asyncio.sleep(1.0)  # a claimer that had stolen an entry would run it again by now
    assert calls == [w.session_id for w in sent]


# ---------------------------------------------------------------- consumer processes


class ConsumerProc:
    def __init__(self, redis_url: str, stream: str, prefix: str, log: Path, *args: str) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.bus_consumer", redis_url, stream, prefix, *args],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "ab"),  # noqa: SIM115 - closed with the child
        )

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def procs() -> Iterator[list[ConsumerProc]]:
    started: list[ConsumerProc] = []
    yield started
    for p in started:
        p.stop()


async def _started(client: aioredis.Redis, prefix: str, pid: int) -> bool:
    return any(v.decode().startswith(f"{pid}:") for v in await client.lrange(f"{prefix}:started", 0, -1))


@pytest.mark.parametrize("hang", ["before", "after"])
async def test_consumer_killed_mid_handler_is_reclaimed_and_the_effect_happens_once(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path, procs: list[ConsumerProc], hang: str
) -> None:
    """SIGKILL inside the handler, before or after its effect: the entry is reclaimed by another
    process's claimer, the effect is applied exactly once, and the PEL ends empty."""
    stream, prefix = new_stream(), f"gamma:test:{uuid.uuid4().hex[:8]}"
    first = ConsumerProc(redis_url, stream, prefix, tmp_path / "first.log", "--hang", hang)
    procs.append(first)
    await eventually(lambda: redis_client.lrange(f"{prefix}:ready", 0, -1), what="the first consumer")
    async with producer(redis_url) as pub:
        wake = Wake(session_id="s1")
        await publish(pub, stream, wake)
    await eventually(lambda: _started(redis_client, prefix, first.proc.pid), what="the handler to start")
    if hang == "after":
        await eventually(lambda: redis_client.lrange(f"{prefix}:effects", 0, -1), what="the effect")
    first.proc.send_signal(signal.SIGKILL)
    assert first.proc.wait(timeout=30) == -signal.SIGKILL
    assert await pending(redis_client, stream, "faulty") == 1  # the dead consumer's entry is stuck

    second = ConsumerProc(redis_url, stream, prefix, tmp_path / "second.log", "--claim-idle-ms", "1000")
    procs.append(second)
    done = await eventually(lambda: redis_client.lrange(f"{prefix}:done", 0, -1), timeout=30, what="the reclaim")
    assert [d.decode() for d in done] == [f"{second.proc.pid}:{wake.wake_id}"]
    await eventually(lambda: _zero(pending(redis_client, stream, "faulty")), what="an empty PEL")
    assert await redis_client.lrange(f"{prefix}:effects", 0, -1) == [wake.wake_id.encode()]
    assert await redis_client.xlen(keys.DEADLETTER) == 0


async def test_sigterm_mid_handler_finishes_the_in_flight_message(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path, procs: list[ConsumerProc]
) -> None:
    stream, prefix = new_stream(), f"gamma:test:{uuid.uuid4().hex[:8]}"
    proc = ConsumerProc(redis_url, stream, prefix, tmp_path / "c.log", "--work-s", "2")
    procs.append(proc)
    await eventually(lambda: redis_client.lrange(f"{prefix}:ready", 0, -1), what="the consumer")
    async with producer(redis_url) as pub:
        wake = Wake(session_id="s1")
        await publish(pub, stream, wake)
    await eventually(lambda: _started(redis_client, prefix, proc.proc.pid), what="the handler to start")
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.proc.wait(timeout=40) == 0
    # The in-flight handler finished and was acked before the process exited.
    assert await redis_client.lrange(f"{prefix}:effects", 0, -1) == [wake.wake_id.encode()]
    assert await redis_client.lrange(f"{prefix}:stopped", 0, -1) == [str(proc.proc.pid).encode()]
    assert await pending(redis_client, stream, "faulty") == 0
    events = [line["event"] for line in proc.lines()]
    assert events.index("consumer_stopping") < len(events)
    assert all(line.get("service") == "bus-consumer" for line in proc.lines())


# ---------------------------------------------------------------- small awaitable adapters


async def _true(value: bool) -> bool:
    return value


async def _zero(count: Awaitable[int]) -> bool:
    return await count == 0


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n


async def _len(items: Awaitable[list[Any]], n: int) -> list[Any]:
    got = await items
    return got if len(got) >= n else []


async def test_sigterm_mid_batch_finishes_the_current_entry_and_leaves_the_rest_pending(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path, procs: list[ConsumerProc]
) -> None:
    stream, prefix = new_stream(), f"gamma:test:{uuid.uuid4().hex[:8]}"
    await ensure_group(redis_client, stream, "faulty")
    sent = [Wake(session_id=f"s{i}") for i in range(3)]
    async with producer(redis_url) as pub:
        for wake in sent:
            await publish(pub, stream, wake)  # before the consumer starts: one batched read
    first = ConsumerProc(redis_url, stream, prefix, tmp_path / "first.log", "--work-s", "1.5")
    procs.append(first)
    await eventually(lambda: _started(redis_client, prefix, first.proc.pid), what="the first handler")
    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(timeout=40) == 0
    assert await redis_client.lrange(f"{prefix}:effects", 0, -1) == [sent[0].wake_id.encode()]
    assert await pending(redis_client, stream, "faulty") == 2  # not lost: pending, for a claimer

    second = ConsumerProc(redis_url, stream, prefix, tmp_path / "second.log", "--claim-idle-ms", "1000")
    procs.append(second)
    await eventually(lambda: _zero(pending(redis_client, stream, "faulty")), timeout=30, what="the reclaim")
    effects = await redis_client.lrange(f"{prefix}:effects", 0, -1)
    assert sorted(effects) == sorted(w.wake_id.encode() for w in sent)

