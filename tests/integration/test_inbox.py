"""shared/streams/inbox.py against a real Redis: multiplexed reads, ack, takeover of a previous holder's
pending entries, malformed entries dead-lettered."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from shared.contracts.streams.deadletter import DeadLetter
from shared.contracts.streams.inbox import Barrier, Stop, UserPrompt
from shared.redis import keys
from shared.streams.bus import ensured_groups
from shared.streams.inbox import GROUP, InboxReader, append


def sid() -> str:
    return "s" + uuid.uuid4().hex[:10]


async def xreadgroup_calls(client: aioredis.Redis) -> int:
    """XREADGROUP calls Redis has served (the reader must multiplex, not loop per session)."""
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_xreadgroup", {}).get("calls", 0))


async def pending(client: aioredis.Redis, session: str) -> int:
    return int((await client.xpending(keys.inbox(session), GROUP))["pending"])


async def test_many_sessions_are_read_in_one_xreadgroup(redis_client: aioredis.Redis) -> None:
    sessions = [sid() for _ in range(20)]
    reader = InboxReader(redis_client, "worker-1")
    for s in sessions:
        assert await reader.add(s) == []
    assert reader.sessions == frozenset(sessions)
    sent: dict[str, list[str]] = {s: [] for s in sessions}
    for i in range(3):
        for s in sessions:
            msg = UserPrompt(session_id=s, message=f"hello {i}")
            entry_id = await append(redis_client, msg)
            assert entry_id.count("-") == 1
            sent[s].append(msg.id)

    calls = await xreadgroup_calls(redis_client)
    entries = await reader.read(block_ms=1000, count=100)
    assert await xreadgroup_calls(redis_client) == calls + 1
    got: dict[str, list[str]] = {s: [] for s in sessions}
    for entry in entries:
        assert entry.message.session_id == entry.session_id
        got[entry.session_id].append(entry.message.id)
    assert got == sent  # every session, in order per session

    for s in sessions:
        assert await pending(redis_client, s) == 3
    for entry in entries:
        await reader.ack(entry.session_id, entry.entry_id)
    for s in sessions:
        assert await pending(redis_client, s) == 0
    assert await reader.read(block_ms=100) == []


async def test_count_bounds_one_read_and_the_rest_follows(redis_client: aioredis.Redis) -> None:
    s = sid()
    reader = InboxReader(redis_client, "worker-1")
    await reader.add(s)
    for i in range(5):
        await append(redis_client, UserPrompt(session_id=s, message=str(i)))
    first = await reader.read(block_ms=500, count=2)
    rest = await reader.read(block_ms=500, count=100)
    assert [e.message.message if isinstance(e.message, UserPrompt) else e for e in first + rest] == ["0", "1", "2", "3", "4"]


async def test_entries_appended_before_the_reader_existed_are_read(redis_client: aioredis.Redis) -> None:
    s = sid()
    early = await append(redis_client, Barrier(session_id=s, wake_id="w1"))
    reader = InboxReader(redis_client, "worker-1")
    await reader.add(s)
    entries = await reader.read(block_ms=500)
    assert [e.entry_id for e in entries] == [early]


async def test_removed_session_is_no_longer_read(redis_client: aioredis.Redis) -> None:
    a, b = sid(), sid()
    reader = InboxReader(redis_client, "worker-1")
    await reader.add(a)
    await reader.add(b)
    reader.remove(a)
    await append(redis_client, Stop(session_id=a))
    await append(redis_client, Stop(session_id=b))
    entries = await reader.read(block_ms=500)
    assert [e.session_id for e in entries] == [b]
    reader.remove(b)
    assert await reader.read(block_ms=100) == []


async def test_new_holder_claims_the_previous_holders_pending_entries(redis_client: aioredis.Redis) -> None:
    s = sid()
    old = InboxReader(redis_client, "worker-old")
    await old.add(s)
    ids = [await append(redis_client, UserPrompt(session_id=s, message=str(i))) for i in range(3)]
    read = await old.read(block_ms=500)
    assert [e.entry_id for e in read] == ids
    await old.ack(s, ids[0])  # the old holder finished one entry, then died

    new = InboxReader(redis_client, "worker-new")
    claimed = await new.add(s)
    assert [e.entry_id for e in claimed] == ids[1:]
    details = await redis_client.xpending_range(keys.inbox(s), GROUP, min="-", max="+", count=10)
    assert {d["consumer"] for d in details} == {b"worker-new"}
    later = await append(redis_client, UserPrompt(session_id=s, message="after takeover"))
    assert [e.entry_id for e in await new.read(block_ms=500)] == [later]
    for entry_id in [*ids[1:], later]:
        await new.ack(s, entry_id)
    assert await pending(redis_client, s) == 0
    assert await new.claim_pending(s) == []


async def test_claim_pending_pages_through_many_entries(redis_client: aioredis.Redis) -> None:
    s = sid()
    old = InboxReader(redis_client, "worker-old")
    await old.add(s)
    for i in range(250):
        await append(redis_client, Stop(session_id=s, reason=str(i)))
    total = 0
    while batch := await old.read(block_ms=200, count=100):
        total += len(batch)
    assert total == 250
    claimed = await InboxReader(redis_client, "worker-new").claim_pending(s)
    assert [e.message.reason if isinstance(e.message, Stop) else e for e in claimed] == [str(i) for i in range(250)]


async def test_malformed_entries_are_dead_lettered_and_acked(redis_client: aioredis.Redis) -> None:
    s = sid()
    reader = InboxReader(redis_client, "worker-1")
    await reader.add(s)
    stream = keys.inbox(s)
    with capture_logs() as logs:
        no_data = (await redis_client.xadd(stream, {"type": "user_prompt"})).decode()
        bad_json = (await redis_client.xadd(stream, {"type": "user_prompt", "data": "{oops"})).decode()
        unknown = (await redis_client.xadd(stream, {"type": "x", "data": '{"type": "x", "session_id": "' + s + '"}'})).decode()
        missing = (await redis_client.xadd(stream, {"type": "user_prompt", "data": '{"type": "user_prompt"}'})).decode()
        good = await append(redis_client, UserPrompt(session_id=s, message="fine"))
        entries = await reader.read(block_ms=500)
    assert [e.entry_id for e in entries] == [good]
    letters = [DeadLetter.model_validate_json(f[b"data"]) for _, f in await redis_client.xrange(keys.DEADLETTER)]
    assert [d.entry_id for d in letters] == [no_data, bad_json, unknown, missing]
    assert all(d.stream == stream and d.group == GROUP and d.error.startswith("invalid inbox entry") for d in letters)
    assert "no data field" in letters[0].error
    assert letters[3].fields == {"type": "user_prompt", "data": '{"type": "user_prompt"}'}
    assert await pending(redis_client, s) == 1  # only the good entry, until the runtime acks it
    logged = [e for e in logs if e["event"] == "dead_letter"]
    assert [e["entry_id"] for e in logged] == [no_data, bad_json, unknown, missing]


async def test_malformed_pending_entry_is_dead_lettered_on_takeover(redis_client: aioredis.Redis) -> None:
    s = sid()
    await InboxReader(redis_client, "worker-old").add(s)
    bad = (await redis_client.xadd(keys.inbox(s), {"type": "user_prompt", "data": "[]"})).decode()
    good = await append(redis_client, Stop(session_id=s))
    # The old holder read both (raw, as if it died before decoding) and never acked.
    await redis_client.xreadgroup(GROUP, "worker-old", {keys.inbox(s): ">"}, count=10)
    assert await pending(redis_client, s) == 2

    claimed = await InboxReader(redis_client, "worker-new").add(s)
    assert [e.entry_id for e in claimed] == [good]
    assert await pending(redis_client, s) == 1  # the malformed one was acked after dead-lettering
    [(_, fields)] = await redis_client.xrange(keys.DEADLETTER)
    assert DeadLetter.model_validate_json(fields[b"data"]).entry_id == bad


async def test_a_vanished_inbox_does_not_stop_the_other_sessions(redis_client: aioredis.Redis) -> None:
    """A deleted inbox makes XREADGROUP fail for every stream in the call (NOGROUP): the reader
    recreates the group and goes on serving the other sessions."""
    a, b = sid(), sid()
    reader = InboxReader(redis_client, "worker-1")
    await reader.add(a)
    await reader.add(b)
    await redis_client.delete(keys.inbox(a))  # on purpose: no subscriber but this reader uses this db
    with capture_logs() as logs:
        good = await append(redis_client, Stop(session_id=b))
        entries = await reader.read(block_ms=500)
    assert [e.entry_id for e in entries] == [good]
    assert any(e["event"] == "stream_group_recreated" for e in logs)
    # Per-session groups are not watched by readiness: a session's inbox may legitimately go away.
    assert not [s for s, _ in ensured_groups(redis_client) if s.endswith(":inbox")]
    later = await append(redis_client, Stop(session_id=a))
    assert [e.entry_id for e in await reader.read(block_ms=500)] == [later]


async def test_entries_a_stale_reader_took_after_the_wake_are_claimed_by_the_holder(redis_client: aioredis.Redis) -> None:
    import asyncio

    s = sid()
    holder = InboxReader(redis_client, "holder")
    assert await holder.add(s) == []
    mine = await append(redis_client, UserPrompt(session_id=s, message="read by the holder"))
    assert [e.entry_id for e in await holder.read(block_ms=100)] == [mine]
    # A worker paused past its lease, resumed after the wake, reads what was appended meanwhile.
    stale = InboxReader(redis_client, "paused")
    await stale.streams.add(s)  # reading s without the wake's claim (a stale view)
    taken = await append(redis_client, UserPrompt(session_id=s, message="read by the stale worker"))
    assert [e.entry_id for e in await stale.read(block_ms=100)] == [taken]
    assert await holder.claim_foreign([s], min_idle_ms=200) == []  # not idle long enough yet
    await asyncio.sleep(0.25)
    claimed = await holder.claim_foreign([s, sid()], min_idle_ms=200)  # a session without a group: skipped
    assert [e.entry_id for e in claimed] == [taken]  # never the holder's own pending entry
    detail = await redis_client.xpending_range(keys.inbox(s), GROUP, "-", "+", 10)
    assert {p["message_id"].decode(): p["consumer"].decode() for p in detail} == {mine: "holder", taken: "holder"}


async def test_the_packed_read_follows_the_session_set(redis_client: aioredis.Redis) -> None:
    """The XREADGROUP is packed once per session set: a session added or removed after a read is
    read, or no longer read, by the next one."""
    a, b = sid(), sid()
    reader = InboxReader(redis_client, "worker-1")
    await reader.add(a)
    await append(redis_client, UserPrompt(session_id=a, message="1"))
    assert [e.session_id for e in await reader.read(block_ms=200)] == [a]
    await reader.add(b)
    await append(redis_client, UserPrompt(session_id=b, message="2"))
    assert [e.session_id for e in await reader.read(block_ms=200)] == [b]
    reader.remove(b)
    await append(redis_client, UserPrompt(session_id=b, message="3"))
    assert await reader.read(block_ms=100) == []
    assert await pending(redis_client, b) == 1  # read only by its first delivery


async def test_a_cancelled_blocking_read_leaves_the_pool_usable(redis_client: aioredis.Redis) -> None:
    s = sid()
    reader = InboxReader(redis_client, "worker-1")
    await reader.add(s)
    task = asyncio.ensure_future(reader.read(block_ms=5000))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # A connection still blocked in the cancelled read would hold the next command for 5 s and then
    # answer it with the read's reply.
    key = f"test:{s}"
    for _ in range(3):
        await asyncio.wait_for(redis_client.set(key, "v"), 1)
        assert await asyncio.wait_for(redis_client.get(key), 1) == b"v"
    await append(redis_client, UserPrompt(session_id=s, message="after"))
    entries = await reader.read(block_ms=1000)
    assert [e.message.message if isinstance(e.message, UserPrompt) else e for e in entries] == ["after"]


async def test_sessions_are_read_in_shards_all_in_flight(redis_client: aioredis.Redis) -> None:
    """70 sessions: three blocking reads (32 + 32 + 6 streams), each on its own connection; every
    entry is read once, whichever shard answers first."""
    sessions = [sid() for _ in range(70)]
    reader = InboxReader(redis_client, "worker-1")
    for s in sessions:
        await reader.add(s)
    calls = await xreadgroup_calls(redis_client)
    assert await reader.read(block_ms=100) == []
    assert await xreadgroup_calls(redis_client) == calls + 3
    sent = {s: (await append(redis_client, UserPrompt(session_id=s, message=s))) for s in sessions}
    got: dict[str, str] = {}
    for _ in range(10):
        for entry in await reader.read(block_ms=200):
            assert entry.session_id not in got
            got[entry.session_id] = entry.entry_id
        if len(got) == len(sent):
            break
    assert got == sent
    await reader.close()


async def test_a_session_added_to_a_shard_in_flight_is_read(redis_client: aioredis.Redis) -> None:
    first, late = sid(), sid()
    reader = InboxReader(redis_client, "worker-1")
    await reader.add(first)
    waiting = asyncio.ensure_future(reader.read(block_ms=300))  # blocked on `first` only
    await asyncio.sleep(0.05)
    await reader.add(late)
    await append(redis_client, UserPrompt(session_id=late, message="late"))
    entries = await waiting  # the read in flight ends at its timeout, without `late`
    entries += await reader.read(block_ms=1000)
    assert [e.session_id for e in entries] == [late]
    await reader.close()
