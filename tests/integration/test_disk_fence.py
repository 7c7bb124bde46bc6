"""The disk fence (services/runtime/live/diskfence.py), with real processes, real Redis and a real disk: a
holder stopped by SIGSTOP at any point of an append, past its lease, never forks the transcript of the
worker that took the session; the disk refuses what it would write, or the new holder reads it first."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from services.runtime.live.diskfence import DiskFence, FenceBehind
from services.runtime.live.lease import Lease, LeaseLost, raise_fence
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.messages import UserMessage
from shared.redis import keys
from tests.reliability.workload import Audit, read_transcript_file
from tests.support.polling import eventually

REPO = Path(__file__).resolve().parents[2]


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


async def start_child(redis_url: str, root: Path, sid: str, where: str) -> subprocess.Popen[str]:
    child = await asyncio.to_thread(
        subprocess.Popen, [sys.executable, "-m", "tests.integration.fence_child", redis_url, str(root), sid, where],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert child.stdout is not None
    assert (await asyncio.to_thread(child.stdout.readline)).startswith("fence ")
    async def child_stopped() -> bool:  # it stops itself at the chosen point of its second append
        assert child.poll() is None, "the child exited instead of stopping"
        return stopped(child.pid)
    await eventually(child_stopped, timeout=20, interval=0.02, what="the child stopped")
    return child


async def take_over(client: aioredis.Redis, sid: str) -> Lease:
    """Another worker takes the session once the paused holder's lease has expired in Redis."""
    return await eventually(lambda: Lease.acquire(client, sid, "taker", 10_000), timeout=10,
                            what="the paused holder's lease expired")


async def resume(child: subprocess.Popen[str]) -> str:
    child.send_signal(signal.SIGCONT)
    out, _ = await asyncio.to_thread(child.communicate, timeout=30)  # the loop runs: our lock goes
    return str(out).strip()


def chain_ok(path: Path) -> list[str]:
    audit = Audit()
    entries = read_transcript_file(path, audit)
    assert audit.stale_writes == [] and audit.corrupt == [] and audit.duplicates == []
    return [e["message"]["content"] for e in entries if e["type"] == "message"]


async def test_holder_stopped_between_its_lease_check_and_the_disk_writes_nothing(
        redis_client: aioredis.Redis, redis_url: str, tmp_path: Path) -> None:
    child = await start_child(redis_url, tmp_path, "fenced1", "after_lease_check")
    try:
        lease = await take_over(redis_client, "fenced1")
        disk = DiskFence(tmp_path / ".fence", "fenced1", lease.fence)
        await disk.claim()  # the paused holder holds no lock here: the claim is immediate
        t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(disk=disk))
        await t.append_message(UserMessage(content="the new holder"))
    finally:
        out = await resume(child)
    # It had passed its lease check before the pause; the disk refused its write once it resumed.
    assert out.endswith("refused LeaseLost")
    assert chain_ok(tmp_path / "transcript.jsonl") == ["before the pause", "the new holder"]


async def test_holder_stopped_inside_its_write_is_read_by_the_new_holder(
        redis_client: aioredis.Redis, redis_url: str, tmp_path: Path) -> None:
    child = await start_child(redis_url, tmp_path, "fenced2", "inside_hold")
    try:
        lease = await take_over(redis_client, "fenced2")
        disk = DiskFence(tmp_path / ".fence", "fenced2", lease.fence)
        claim = asyncio.ensure_future(disk.claim())
        await asyncio.sleep(0.5)  # scenario: the claim must still be waiting after a while
        assert not claim.done()  # the frozen writer holds the fence's lock: the new holder waits
    finally:
        out = await resume(child)
    await asyncio.wait_for(claim, 10)
    assert out.endswith("wrote")  # its write came before the claim: the new holder reads it
    t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(disk=disk))
    await t.append_message(UserMessage(content="the new holder"))
    assert chain_ok(tmp_path / "transcript.jsonl") == ["before the pause", "written by the paused holder",
                                                      "the new holder"]


async def test_a_stale_fence_is_refused_and_a_disk_ahead_of_redis_raises_the_counter(
        redis_client: aioredis.Redis, tmp_path: Path) -> None:
    old = DiskFence(tmp_path / ".fence", "fenced3", 4)
    await old.claim()
    new = DiskFence(tmp_path / ".fence", "fenced3", 5)
    await new.claim()
    with pytest.raises(LeaseLost):
        await old.hold()
    with pytest.raises(FenceBehind) as behind:  # an older holder can never claim back
        await DiskFence(tmp_path / ".fence", "fenced3", 3).claim()
    assert behind.value.stored == 5
    await redis_client.hset(keys.session_row("fenced3"), keys.FENCE_FIELD, 2)  # Redis lost its counter (a restore)
    await raise_fence(redis_client, "fenced3", behind.value.stored)
    lease = await Lease.acquire(redis_client, "fenced3", "w1", 10_000)
    assert lease is not None and lease.fence == 6
    await DiskFence(tmp_path / ".fence", "fenced3", lease.fence).claim()
    await raise_fence(redis_client, "fenced3", 1)  # never lowers it
    assert int(await redis_client.hget(keys.session_row("fenced3"), keys.FENCE_FIELD)) == 6
