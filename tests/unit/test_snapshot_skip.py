"""A live session's snapshot is not taken when the guard saw no write that may change the files since
the last one (services/runtime/store/snapshots.py, write_guard.py `changes`); a write, a restore or a
command outside the guard makes the next one scan again. The transcript's own `then` hand-off: the
fence goes back before the fsync, which runs in the same thread."""

from __future__ import annotations

import threading
from pathlib import Path

from services.runtime.live.diskfence import DiskFence
from services.runtime.store.snapshots import SessionSnapshots
from services.runtime.store.write_guard import WriteGuard
from shared.storage.disk import SessionPaths, atomic_write_bytes
from shared.storage.snapshots import SnapshotLimits


async def _live(tmp_path: Path) -> tuple[WriteGuard, SessionSnapshots, list[str]]:
    paths = SessionPaths(tmp_path / "s1")
    paths.workspace.mkdir(parents=True)
    disk = DiskFence(paths.fence, "s1", 7)
    await disk.claim()
    guard = WriteGuard(disk=disk)
    scans: list[str] = []
    snapshots = SessionSnapshots("s1", paths, SnapshotLimits(), guard, lambda: "leaf")
    store = snapshots.store
    take = store.take

    def counted(entry: str | None, reason: str, *, force: bool = False):  # type: ignore[no-untyped-def]
        scans.append(reason)
        return take(entry, reason, force=force)

    store.take = counted  # type: ignore[method-assign]
    return guard, snapshots, scans


async def test_nothing_written_since_the_last_snapshot_skips_the_scan(tmp_path: Path) -> None:
    guard, snapshots, scans = await _live(tmp_path)
    file = snapshots.paths.workspace / "a.txt"
    await guard.write(lambda: atomic_write_bytes(file, b"one"))
    assert await snapshots.take("upload") is not None
    assert await snapshots.take("prompt") is None
    await guard.write(lambda: None, files=False)  # a transcript append changes no recorded file
    assert await snapshots.take("run_end") is None
    assert scans == ["upload"]
    await guard.write(lambda: atomic_write_bytes(file, b"two"))
    record = await snapshots.take("upload")
    assert record is not None and "workspace/a.txt" in record.set
    assert await snapshots.take("forced", force=True) is not None  # `force` always records
    assert scans == ["upload", "upload", "forced"]


async def test_a_command_outside_the_guard_makes_every_later_snapshot_scan(tmp_path: Path) -> None:
    guard, snapshots, scans = await _live(tmp_path)
    assert await snapshots.take("prompt") is not None
    await guard()  # a sandboxed command's check: it writes on by itself after it
    atomic_write_bytes(snapshots.paths.workspace / "b.txt", b"by the command")
    assert await snapshots.take("batch") is not None
    atomic_write_bytes(snapshots.paths.workspace / "b.txt", b"still running")
    record = await snapshots.take("run_end")
    assert record is not None and "workspace/b.txt" in record.set
    assert scans == ["prompt", "batch", "run_end"]


async def test_a_reload_scans_again(tmp_path: Path) -> None:
    guard, snapshots, scans = await _live(tmp_path)
    assert await snapshots.take("prompt") is not None
    snapshots.reload()
    assert snapshots._seen is None


async def test_then_runs_in_the_same_thread_after_written_and_the_fence_release(tmp_path: Path) -> None:
    disk = DiskFence(tmp_path / ".fence", "s1", 7)
    await disk.claim()
    guard = WriteGuard(disk=disk)
    order: list[str] = []
    threads: list[int] = []

    def write() -> str:
        threads.append(threading.get_ident())
        order.append("write")
        return "lines"

    def then(result: str) -> None:
        threads.append(threading.get_ident())
        order.append("then:" + result)

    assert await guard.write(write, lambda r: order.append("written:" + r), files=False, then=then) == "lines"
    assert threads[0] == threads[1] != threading.get_ident()
    assert order[0] == "write" and set(order[1:]) == {"written:lines", "then:lines"}
    assert guard.changes == 0  # files=False
    await guard.write(lambda: None)  # the fence and the turn are free again
    assert guard.changes == 1
