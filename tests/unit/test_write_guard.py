"""The session's WriteGuard (services/runtime/store/write_guard.py): writes run in the I/O pool with the disk
fence held from the check to the write's end, a cancelled caller cannot free the fence mid-write, a
session's writes take turns, and the event loop runs meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from services.runtime.live.diskfence import DiskFence
from services.runtime.live.lease import LeaseLost
from services.runtime.store.write_guard import WriteGuard


def locked_elsewhere(path: Path) -> bool:
    """Whether another holder (another open file description, as another process has) is locked out."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


async def fenced(tmp_path: Path) -> tuple[WriteGuard, Path]:
    disk = DiskFence(tmp_path / ".fence", "s1", 7)
    await disk.claim()
    return WriteGuard(disk=disk), tmp_path / ".fence"


async def test_the_fence_is_held_for_the_whole_write_even_when_the_caller_is_cancelled(tmp_path: Path) -> None:
    guard, fence = await fenced(tmp_path)
    started, go_on = threading.Event(), threading.Event()
    seen: list[bool] = []

    def slow_write() -> str:
        started.set()
        go_on.wait(5)
        seen.append(locked_elsewhere(fence))
        return "done"

    task = asyncio.ensure_future(guard.write(slow_write, lambda r: seen.append(r == "done")))
    await asyncio.to_thread(started.wait, 5)
    assert locked_elsewhere(fence)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert locked_elsewhere(fence), "cancelling the caller must not free the fence while the write runs"
    go_on.set()
    for _ in range(200):
        if not locked_elsewhere(fence):
            break
        await asyncio.sleep(0.01)
    assert seen == [True, True]  # locked during the write; `written` ran although the caller was cancelled
    assert not locked_elsewhere(fence)


async def test_a_sessions_writes_take_turns(tmp_path: Path) -> None:
    """Without turns the second write would pass the first's flock (same open file description) and
    release it at its end while the first still writes."""
    guard, fence = await fenced(tmp_path)
    order: list[str] = []
    first_in, release_first = threading.Event(), threading.Event()

    def first() -> None:
        order.append("first start")
        first_in.set()
        release_first.wait(5)
        order.append("first end")

    def second() -> None:
        order.append("second")

    a = asyncio.ensure_future(guard.write(first))
    await asyncio.to_thread(first_in.wait, 5)
    b = asyncio.ensure_future(guard.write(second))
    await asyncio.sleep(0.05)
    assert order == ["first start"] and locked_elsewhere(fence)
    release_first.set()
    await asyncio.gather(a, b)
    assert order == ["first start", "first end", "second"]


async def test_the_loop_runs_while_a_slow_write_does(tmp_path: Path) -> None:
    guard, _ = await fenced(tmp_path)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    t = asyncio.ensure_future(ticker())
    await guard.write(lambda: time.sleep(0.2))  # an fsync on a network filesystem
    t.cancel()
    assert ticks >= 10


async def test_a_newer_fence_on_disk_refuses_the_write(tmp_path: Path) -> None:
    guard, fence = await fenced(tmp_path)
    newer = DiskFence(fence, "s1", 8)
    await newer.claim()
    wrote: list[int] = []
    with pytest.raises(LeaseLost):
        await guard.write(lambda: wrote.append(1))
    assert wrote == [] and not locked_elsewhere(fence)
    newer.close()


async def test_a_failed_write_releases_the_fence(tmp_path: Path) -> None:
    guard, fence = await fenced(tmp_path)

    def full() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        await guard.write(full)
    assert not locked_elsewhere(fence)
    assert await guard.write(lambda: 3) == 3
