"""The suite's event-loop teardown is bounded (tests/support/teardown_guard.py): a task that swallows
its cancel is named, and the loop closes anyway."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from tests.support import teardown_guard
from tests.support.teardown_guard import StuckTasks

REPO = Path(__file__).resolve().parents[2]


async def swallower() -> None:
    while True:
        with contextlib.suppress(asyncio.CancelledError):  # the bug the guard is for
            await asyncio.sleep(0.01)


async def start(coro_fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(coro_fn(), name=name)


def test_a_task_that_swallows_its_cancel_is_named_and_the_loop_still_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teardown_guard, "BOUND_S", 0.2)
    runner = asyncio.Runner()
    task = runner.run(start(swallower, "the-swallower"))
    loop = runner.get_loop()
    with pytest.raises(StuckTasks, match=r"1 task\(s\) still running .* the-swallower \(swallower\) at .*in swallower"):
        runner.close()
    assert loop.is_closed() and not task.done()


def test_tasks_that_stop_on_their_cancel_end_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teardown_guard, "BOUND_S", 5.0)
    runner = asyncio.Runner()
    tasks = [runner.run(start(lambda: asyncio.sleep(60), f"sleeper-{i}")) for i in range(3)]
    runner.close()
    assert all(t.cancelled() for t in tasks)


def test_a_pytest_asyncio_test_that_leaves_a_swallower_fails_in_teardown_and_the_run_ends(tmp_path: Path) -> None:
    """The guard as a plugin in a pytest run of its own: the test's teardown errors, naming the task,
    and the next test runs."""
    (tmp_path / "test_leaves_one.py").write_text(
        "import asyncio\n"
        "from tests.support import teardown_guard\n"
        "teardown_guard.BOUND_S = 0.3\n"
        "async def test_leaves_a_swallower():\n"
        "    async def swallower():\n"
        "        while True:\n"
        "            try:\n"
        "                await asyncio.sleep(0.01)\n"
        "            except asyncio.CancelledError:\n"
        "                pass\n"
        "    asyncio.get_running_loop().create_task(swallower(), name='left-behind')\n"
        "async def test_next():\n"
        "    await asyncio.sleep(0)\n"
    )
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "-c", str(REPO / "pyproject.toml"), "-p", "tests.support.teardown_guard",
                          str(tmp_path / "test_leaves_one.py")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "2 passed, 1 error" in out.stdout, out.stdout + out.stderr
    assert "StuckTasks" in out.stdout and "left-behind" in out.stdout, out.stdout
