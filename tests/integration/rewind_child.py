"""A runtime's rewind killed (SIGKILL) at a chosen point, for test_rewind_crash.py:
`python -m tests.integration.rewind_child REDIS_URL DATA_DIR SID ENTRY_ID WHERE`.

It takes the session's lease and disk fence as a runtime worker does and runs the runtime's own
`Rewinder.rewind` (services/runtime/store/rewind.py) on the real transcript, snapshots and todo; the parts a
rewind only notifies (the run aborter, the protocol's context, the outbox) are inert here. WHERE:
`restore` kills it after two workspace entries were restored, `moves` once the leaf move is in the
transcript, before the intent is removed. It prints `armed` before the rewind starts."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from services.runtime.live.diskfence import DiskFence
from services.runtime.live.lease import Lease
from services.runtime.store.rewind import Rewinder
from services.runtime.store.snapshots import SessionSnapshots
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.storage import snapshot_restore
from shared.storage.disk import session_paths
from shared.storage.snapshots import SnapshotLimits


class Inert:
    """The aborter, protocol, outbox and file list of a session with no run and no clients."""

    async def abort(self, reason: str) -> None:
        return None

    def restore_context(self) -> None:
        return None

    async def event(self, type: str, data: dict[str, Any] | None = None) -> None:
        return None

    async def reply(self, request_id: str, status: int, body: dict[str, Any]) -> None:
        return None

    async def refresh_viewable(self, announce: bool = False) -> None:
        return None


async def ack(entry_id: str | None) -> None:
    return None


def die_after(calls: int, target: Any) -> Any:
    seen = {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if seen["n"] >= calls:
            os.kill(os.getpid(), signal.SIGKILL)
        seen["n"] += 1
        return target(*args, **kwargs)

    return wrapped


async def main(url: str, data_dir: Path, sid: str, entry_id: str, where: str) -> None:
    client = aioredis.from_url(url)
    lease = await Lease.acquire(client, sid, f"child-{os.getpid()}", 3000)
    assert lease is not None, "the session is leased"
    paths = session_paths(data_dir, sid)
    disk = DiskFence(paths.fence, sid, lease.fence, lock_timeout_s=5)
    await disk.claim()

    guard = WriteGuard(lease.check, disk)
    transcript = Transcript.load(paths.transcript, guard)
    snapshots = SessionSnapshots(sid, paths, SnapshotLimits(), guard, lambda: transcript.leaf_id)
    inert = Inert()
    rewinder = Rewinder(sid, transcript, TodoController.load(paths.todo, guard), inert, snapshots, inert, inert,
                        outbox=inert, guard=guard, ack=ack)
    if where == "restore":
        snapshot_restore._make = die_after(2, snapshot_restore._make)
    else:
        append = transcript.append_entry

        async def append_then_die(entry: Any) -> Any:
            await append(entry)
            os.kill(os.getpid(), signal.SIGKILL)  # the move is in the transcript; the intent is not done

        transcript.append_entry = append_then_die  # type: ignore[method-assign]
    print("armed", flush=True)
    await rewinder.rewind(entry_id, "rewind")
    print("finished", flush=True)  # never: the kill point is inside the rewind


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]))
