"""Worker death and lease loss: a killed runtime's session is resumed by another worker without
duplicated or lost entries, and a worker whose lease was taken cannot write."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from services.runtime.live.lease import Lease, LeaseLost, safety_margin_s
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import UserMessage
from shared.contracts.streams.inbox import Barrier, Injection
from shared.redis import keys
from tests.integration.runtime_support import Driver, call, done, kinds, script, transcript
from tests.support.polling import wait_sync
from tests.support.stack import Stack


def go_live(d: Driver, sid: str) -> None:
    wake_id = d.wake(sid)
    d.wait_event(sid, lambda e: e["type"] == "status" and e["data"]["status"] == "live", what="live")
    d.append(Barrier(session_id=sid, wake_id=wake_id))


@pytest.mark.slow
def test_sigkill_mid_run_another_worker_resumes_without_duplicates(stack_factory) -> None:
    rt: Stack = stack_factory(start=False)
    rt.start("runtime")
    d = Driver(rt.redis_url)
    sid = "kill1"
    go_live(d, sid)
    prompt = d.prompt(sid, script({"tool_calls": [call("bash", command="sleep 30")]}, done("resumed")))
    d.wait_event(sid, lambda e: e["type"] == "tool_execution_start", what="bash started")
    d.append(Injection(session_id=sid, injection=RuntimeInjection(kind="system_update", content="<system_update>"
                       "x</system_update>"), source="notification", source_id="n-kill"))
    time.sleep(0.5)  # let the doomed worker read (but never ack) the injection
    before = transcript(rt.data_dir, sid)
    rt.kill("runtime", signal.SIGKILL)
    rt.start("runtime")  # a new process: another worker id and consumer name
    d.wait_event(sid, lambda e: e["type"] == "message_user" and e["data"]["message"] == "resumed", timeout=60,
                 what="the resumed run's answer")
    # the answer's event goes out before its toolResult is appended: wait for the entry itself
    entries = wait_sync(lambda: t if kinds(t := transcript(rt.data_dir, sid)).count("toolResult") == 2 else None,
                        timeout=30, what="the answer's toolResult")
    assert entries[: len(before)] == before  # nothing rewritten
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids))
    users = [e for e in entries if e["type"] == "message" and e["message"]["role"] == "user"]
    assert [u.get("promptId") for u in users] == [prompt.prompt_id]
    k = kinds(entries)
    assert k.count("gamma.system_update") == 1
    assert k[k.index("user"):] == ["user", "assistant", "toolResult", "gamma.system_update", "assistant", "toolResult"]
    interrupted = [e["message"] for e in entries if e["type"] == "message" and e["message"]["role"] == "toolResult"][0]
    assert interrupted["isError"] and "Interrupted" in interrupted["content"][0]["text"]
    lease = d.r.get(keys.lease(sid))
    assert lease is not None and lease.decode().endswith(":2")  # the second holder's fence
    assert int(d.r.xpending(keys.inbox(sid), keys.RUNTIME_GROUP)["pending"]) == 0


@pytest.mark.slow
def test_sigterm_persists_releases_and_todo_survives_restart(stack_factory) -> None:
    rt: Stack = stack_factory(start=False)
    rt.start("runtime")
    d = Driver(rt.redis_url)
    sid = "term1"
    go_live(d, sid)
    items = [{"id": "a", "content": "A", "status": "in_progress"}]
    d.prompt(sid, script({"tool_calls": [call("todo", items=items)]}, done()))
    d.wait_event(sid, lambda e: e["type"] == "agent_end", what="run")
    rt.kill("runtime", signal.SIGTERM)
    assert not d.live(sid)
    dormant = d.wait_event(sid, lambda e: e["type"] == "status" and e["data"]["status"] == "dormant", what="dormant")
    assert dormant["data"]["fence"] == 1
    rt.start("runtime")
    go_live(d, sid)
    items[0]["status"] = "complete"
    d.prompt(sid, script({"tool_calls": [call("todo", items=items)]}, done()))
    d.wait_event(sid, lambda e: e["type"] == "todo" and e["data"]["todo"]["revision"] == 2, what="todo rev 2")
    todo = json.loads((Path(rt.data_dir) / "sessions" / sid / "todo.json").read_text())
    assert todo == {"revision": 2, "items": [{"id": "a", "content": "A", "status": "complete", "reason": None}]}


async def test_worker_whose_lease_was_taken_cannot_append(redis_client: aioredis.Redis, tmp_path: Path) -> None:
    lease = await Lease.acquire(redis_client, "taken1", "w1", 400)
    assert lease is not None
    assert await Lease.acquire(redis_client, "taken1", "w2", 10_000) is None  # held: nobody else gets it
    t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(lease.check))
    todo = TodoController.load(tmp_path / "todo.json", WriteGuard(lease.check))
    await t.ensure_header()
    await t.append_message(UserMessage(content="mine"))
    size = (tmp_path / "transcript.jsonl").stat().st_size
    # The holder stalls past its lease; the lease expires and another worker takes it (a new fence).
    await asyncio.sleep(0.5)
    other = await Lease.acquire(redis_client, "taken1", "w2", 10_000)
    assert other is not None and other.fence == lease.fence + 1
    with pytest.raises(LeaseLost):
        await t.append_message(UserMessage(content="stale writer"))
    with pytest.raises(LeaseLost):
        await todo.update([{"id": "a", "content": "A", "status": "in_progress"}])
    assert (tmp_path / "transcript.jsonl").stat().st_size == size
    assert not (tmp_path / "todo.json").exists()
    assert not await lease.renew()
    await lease.release()  # a stale holder's release must not delete the new lease
    assert await redis_client.get(keys.lease("taken1")) == other.value.encode()


async def test_check_needs_no_round_trip_inside_the_lease_and_renews_past_it(redis_client: aioredis.Redis) -> None:
    lease = await Lease.acquire(redis_client, "bound1", "w1", 400)
    assert lease is not None
    await redis_client.set(keys.lease("bound1"), "intruder:9")  # only a lost Redis write could do this
    await lease.check()  # inside the local bound: trusted without asking Redis
    await asyncio.sleep(0.4 - safety_margin_s(400) + 0.02)
    with pytest.raises(LeaseLost):  # past it: the renewal finds the lease is not ours
        await lease.check()
    mine = await Lease.acquire(redis_client, "bound2", "w1", 400)
    assert mine is not None
    for _ in range(4):  # a holder that keeps checking keeps the lease by renewing it
        await asyncio.sleep(0.2)
        await mine.check()
    assert await redis_client.get(keys.lease("bound2")) == mine.value.encode()


@pytest.mark.slow
def test_runtime_paused_past_its_lease_writes_nothing_once_resumed(stack_factory) -> None:
    rt: Stack = stack_factory(start=False)
    rt.start("runtime")
    d = Driver(rt.redis_url)
    sid = "paused1"
    go_live(d, sid)
    d.prompt(sid, script({"tool_calls": [call("bash", command="sleep 1")]}, done("after the pause")))
    d.wait_event(sid, lambda e: e["type"] == "tool_execution_start", what="bash started")
    before = kinds(transcript(rt.data_dir, sid))
    rt.kill("runtime", signal.SIGSTOP)
    try:
        time.sleep(3.5)  # past GAMMA_LEASE_MS=3000: the lease expires in Redis
        other = asyncio.run(_take(rt.redis_url, sid))
        d.prompt(sid, "are you there?")
    finally:
        rt.kill("runtime", signal.SIGCONT)
    time.sleep(3)  # scenario: the resumed old holder has time to (wrongly) write
    assert kinds(transcript(rt.data_dir, sid)) == before  # neither the tool result nor the new prompt
    assert d.r.get(keys.lease(sid)) == other.encode()
    assert "lease_lost" in rt.log("runtime")


async def _take(url: str, sid: str) -> str:
    client = aioredis.from_url(url)
    try:
        lease = await Lease.acquire(client, sid, "intruder", 60_000)
        assert lease is not None, "the paused worker's lease should have expired"
        return lease.value
    finally:
        await client.aclose()


async def test_renewal_never_brings_back_the_running_key_of_a_run_that_ended(redis_client: aioredis.Redis) -> None:
    from services.runtime.live.lease import renew_all

    a = await Lease.acquire(redis_client, "renew-a", "w1", 10_000)
    b = await Lease.acquire(redis_client, "renew-b", "w1", 10_000)
    assert a is not None and b is not None
    await redis_client.set(keys.running("renew-a"), "1", px=10_000)  # still running
    # renew-b's run ended (its key deleted) after the housekeeping listed it as running.
    assert await renew_all(redis_client, [a, b], ["renew-a", "renew-b"], "test:live", 1) == [True, True]
    assert await redis_client.exists(keys.running("renew-a")) and not await redis_client.exists(keys.running("renew-b"))
