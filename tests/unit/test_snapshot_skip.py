"""A live session's snapshot is not taken when the guard saw no write that may change the files since
the last one (services/runtime/store/snapshots.py, write_guard.py `changes`); a write, a restore or a
command outside the guard makes the next one scan again. The transcript's own `then` hand-off: the
fence goes back before the fsync, which runs in the same thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

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


async def test_after_runs_in_the_same_hand_off_with_the_fence_held_and_the_caller_does_not_wait(tmp_path: Path) -> None:
    """write_guard.py `after`: the caller has the write's result while `after` still runs (the fence
    and the turn held until it ends); a write of the session waits for it."""
    disk = DiskFence(tmp_path / ".fence", "s1", 7)
    await disk.claim()
    guard = WriteGuard(disk=disk)
    release = threading.Event()
    threads: list[int] = []
    order: list[str] = []

    def after(result: str) -> None:
        threads.append(threading.get_ident())
        assert release.wait(10)
        order.append("after:" + result)

    def write() -> str:
        threads.append(threading.get_ident())
        return "written"

    assert await guard.write(write, after=after) == "written"  # returned while `after` waits
    assert order == [] and guard.changes == 1
    nxt = asyncio.ensure_future(guard.write(lambda: order.append("next")))
    await asyncio.sleep(0.05)
    assert not nxt.done()  # the turn is still held by `after`
    release.set()
    await nxt
    assert order == ["after:written", "next"] and threads[0] == threads[1] != threading.get_ident()


async def test_a_failed_write_with_after_raises_and_skips_after(tmp_path: Path) -> None:
    guard, _, _ = await _live(tmp_path)
    ran: list[object] = []

    def fail() -> None:
        raise OSError("disk")

    with pytest.raises(OSError):
        await guard.write(fail, after=ran.append)
    assert ran == []
    await guard.write(lambda: None)  # the fence and the turn are free again


async def test_a_clients_write_and_its_snapshot_share_one_hand_off(tmp_path: Path) -> None:
    """snapshots.py `after_write`: the write's result comes back, its snapshot is recorded keyed to
    the leaf in the same job; the next snapshot finds nothing new and skips its scan; a refused write
    (changed False) takes none."""
    guard, snapshots, scans = await _live(tmp_path)
    file = snapshots.paths.workspace / "a.txt"
    hand_offs = 0
    write = guard.write

    async def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal hand_offs
        hand_offs += 1
        return await write(*args, **kwargs)

    guard.write = counted  # type: ignore[method-assign]
    def save() -> str:
        atomic_write_bytes(file, b"one")
        return "ok"

    assert await snapshots.after_write(save, "upload", lambda r: True) == "ok"
    await guard.write(lambda: None, files=False)  # waits for the turn: the snapshot is done
    assert hand_offs == 2 and scans == ["upload"]
    record = snapshots.store.records[-1]
    assert record.entry == "leaf" and record.reason == "upload" and "workspace/a.txt" in record.set
    assert await snapshots.take("prompt") is None  # recorded already: no scan
    assert await snapshots.after_write(lambda: "refused", "upload", lambda r: False) == "refused"
    await guard.write(lambda: None, files=False)
    assert scans == ["upload"]


async def test_a_clients_write_during_a_run_is_left_to_the_next_batch_unless_the_run_ended(tmp_path: Path) -> None:
    """snapshots.py `client_write`: during a run no snapshot (the run's next batch records it); a run
    that ended while the write was made leaves it to this write's own snapshot."""
    guard, snapshots, scans = await _live(tmp_path)
    file = snapshots.paths.workspace / "a.txt"
    states = iter([True, True])
    await snapshots.client_write(lambda: atomic_write_bytes(file, b"during"), lambda r: True, lambda: next(states))
    assert scans == []
    states = iter([True, False])  # running when the write started, not when it was done
    await snapshots.client_write(lambda: atomic_write_bytes(file, b"after the run"), lambda r: True,
                                 lambda: next(states))
    assert scans == ["upload"] and "workspace/a.txt" in snapshots.store.records[-1].set
