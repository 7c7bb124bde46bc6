"""A wake reads the session's files in the I/O pool, never on the event loop (README "Reliability"):
on a slow disk one wake's reads would otherwise hold every live session's turn. Each file here is a
FIFO, a read that cannot finish until the test writes it; the loop must keep running meanwhile."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from services.runtime.hosting.session_files import read_session_files
from services.runtime.store.write_guard import WriteGuard
from services.runtime.ui.liveui import LiveUi
from shared.contracts.records.transcript import SessionHeader
from shared.history import rewind as rw
from shared.history import transcript_index as ix
from shared.storage.disk import SessionPaths, session_paths
from shared.ui.uirules import UiLimits

T = TypeVar("T")


async def no_check() -> None:
    return None


async def blocked_until_written(read: Awaitable[T], fifo: Path, content: bytes) -> T:
    """Run `read` while `fifo` holds it, count the loop's ticks meanwhile, then feed the FIFO."""
    reading = asyncio.ensure_future(read)
    ticks = 0
    for _ in range(10):
        await asyncio.sleep(0.005)
        ticks += 1
    assert ticks == 10 and not reading.done()  # the loop ran while the read waited on the disk
    for _ in range(400):  # the pool's thread opens the FIFO for reading; until then there is no reader
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            await asyncio.sleep(0.005)
    else:
        raise AssertionError("the read never opened the file")
    os.write(fd, content)
    os.close(fd)
    return await asyncio.wait_for(reading, timeout=5)


def layout(tmp_path: Path) -> SessionPaths:
    paths = session_paths(tmp_path, "s1")
    paths.root.mkdir(parents=True)
    return paths


async def test_the_transcript_and_todo_are_read_off_the_loop(tmp_path: Path) -> None:
    """The wake's first read is the transcript index (shared/history/transcript_index.py), then the window's lines."""
    paths = layout(tmp_path)
    header = SessionHeader(id="h1", timestamp="2026-01-01T00:00:00Z")
    paths.transcript.write_bytes(header.model_dump_json(by_alias=True).encode() + b"\n")
    index = ix.rebuild(paths.transcript).model_dump_json().encode()
    ix.index_path(paths.transcript).unlink()
    os.mkfifo(ix.index_path(paths.transcript))
    paths.todo.write_text(json.dumps({"items": []}))
    files = await blocked_until_written(read_session_files(paths), ix.index_path(paths.transcript), index)
    assert [e.id for _, e in files.transcript.window] == ["h1"] and files.todo == {"items": []}
    assert not files.transcript.rebuilt


async def test_the_ui_state_is_read_off_the_loop_at_its_first_use(tmp_path: Path) -> None:
    paths = layout(tmp_path)
    os.mkfifo(paths.state)
    ui = LiveUi(paths, UiLimits(), WriteGuard(no_check), outbox=None)  # type: ignore[arg-type]  # nothing is published
    doc = await blocked_until_written(ui.document(), paths.state, b"{}")
    assert await ui.document() is doc  # read once


class CountingPool(ThreadPoolExecutor):
    jobs = 0

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        CountingPool.jobs += 1
        return super().submit(fn, *args, **kwargs)


async def test_a_wakes_reads_are_one_hand_off(tmp_path: Path) -> None:
    """The UI state, a pending rewind and the workspace's file list come with the transcript and the
    todo list: one job in the I/O pool, not four (bench/README.md "bench-e2e")."""
    paths = layout(tmp_path)
    (paths.workspace / "d").mkdir(parents=True)
    (paths.workspace / "d" / "a.txt").write_text("a")
    paths.state.write_text(json.dumps({"costs": []}))
    CountingPool.jobs = 0
    asyncio.get_running_loop().set_default_executor(CountingPool(1))
    files = await read_session_files(paths)
    assert CountingPool.jobs == 1
    assert files.ui == {"costs": []} and files.intent is None and files.viewable == ["d/a.txt"]
    # A rewind a crash cut short changes the files when it is finished: the wake walks after it.
    rw.intent_path(paths).parent.mkdir(parents=True)
    rw.intent_path(paths).write_text(json.dumps({"record": 0, "target_id": "e1", "entries": []}))
    files = await read_session_files(paths)
    assert files.intent is not None and files.intent.target_id == "e1" and files.viewable is None


async def test_the_ui_state_the_wake_read_is_not_read_again(tmp_path: Path) -> None:
    paths = layout(tmp_path)
    os.mkfifo(paths.state)  # a read of it would wait for a writer that never comes
    ui = LiveUi(paths, UiLimits(), WriteGuard(no_check), outbox=None)  # type: ignore[arg-type]  # nothing is published
    ui.preload({"expandedDirs": ["docs"]})
    doc = await asyncio.wait_for(ui.document(), timeout=5)
    assert doc.snapshot().get("expandedDirs") == ["docs"]
    assert await ui.document() is doc
