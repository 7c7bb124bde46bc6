"""A lease holder that stops itself (SIGSTOP) at a chosen point of a transcript append, for
test_disk_fence.py: `python -m tests.integration.fence_child REDIS_URL SESSION_DIR SID WHERE`.

WHERE = `after_lease_check`: between the lease check and the disk fence (the gap a paused worker used
to write through); `inside_hold`: after the disk fence, before the write (the lock is held). It prints
`fence <n>` once live and, once resumed, `wrote` or `refused <exception>`."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import redis.asyncio as aioredis

from services.runtime.live.diskfence import DiskFence
from services.runtime.live.lease import Lease, LeaseLost
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.messages import UserMessage


async def main(url: str, root: Path, sid: str, where: str) -> None:
    client = aioredis.from_url(url)
    lease = await Lease.acquire(client, sid, f"child-{os.getpid()}", 600)
    assert lease is not None
    stop_here = {"armed": False}

    class PausingFence(DiskFence):
        async def hold(self) -> None:
            await super().hold()
            if stop_here["armed"] and where == "inside_hold":
                os.kill(os.getpid(), signal.SIGSTOP)

    disk = PausingFence(root / ".fence", sid, lease.fence, lock_timeout_s=5)
    await disk.claim()

    async def check() -> None:
        await lease.check()
        if stop_here["armed"] and where == "after_lease_check":
            os.kill(os.getpid(), signal.SIGSTOP)

    t = Transcript.load(root / "transcript.jsonl", WriteGuard(check, disk))
    await t.ensure_header()
    await t.append_message(UserMessage(content="before the pause"))
    print(f"fence {lease.fence}", flush=True)
    stop_here["armed"] = True
    try:
        await t.append_message(UserMessage(content="written by the paused holder"))
        print("wrote", flush=True)
    except LeaseLost as exc:
        print(f"refused {type(exc).__name__}", flush=True)
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]))
