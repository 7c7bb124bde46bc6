"""A test's event loop always closes: a bounded cancel of the tasks a test left behind.

An event loop's teardown (asyncio.Runner.close, which pytest-asyncio and asyncio.run use) cancels the
tasks still pending and then waits for all of them without a bound: one task that swallows its cancel
and loops on hangs the suite there until an outer timeout kills it, with nothing naming the culprit.
This plugin (loaded by tests/conftest.py) makes that wait bounded: a task still running BOUND_S after
its cancel fails the test's teardown with its name and the place it is stuck at, and the loop closes
without it.
"""

from __future__ import annotations

import asyncio
import asyncio.runners
from collections.abc import Iterable
from typing import Any

BOUND_S = 10.0


class StuckTasks(AssertionError):
    """Tasks that were still running BOUND_S after their cancel."""


def describe(task: asyncio.Task[Any]) -> str:
    """`name (coroutine) at file:line in function` for the innermost frame the task waits in."""
    coro = task.get_coro()
    where = ""
    frames = task.get_stack()
    if frames:
        frame = frames[-1]
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
    return f"{task.get_name()} ({getattr(coro, '__qualname__', coro)!s}){where}"


def cancel_leftovers(loop: asyncio.AbstractEventLoop, bound_s: float) -> set[asyncio.Task[Any]]:
    """Cancel every pending task of `loop` and run the loop until they end, at most `bound_s`; the
    tasks still running then are returned (not awaited any further)."""
    leftovers = asyncio.all_tasks(loop)
    if not leftovers:
        return set()
    for task in leftovers:
        task.cancel()
    done, stuck = loop.run_until_complete(asyncio.wait(leftovers, timeout=bound_s))
    _report_failures(loop, done)
    return stuck


def _report_failures(loop: asyncio.AbstractEventLoop, done: Iterable[asyncio.Task[Any]]) -> None:
    """As asyncio's own teardown does: an exception a leftover task ended with goes to the loop's handler."""
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler({"message": "unhandled exception during event loop teardown",
                                         "exception": task.exception(), "task": task})


def bounded_cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio.runners._cancel_all_tasks with a bound: raises StuckTasks naming what would not stop."""
    stuck = cancel_leftovers(loop, BOUND_S)
    if stuck:
        names = "; ".join(sorted(describe(task) for task in stuck))
        raise StuckTasks(f"{len(stuck)} task(s) still running {BOUND_S:g} s after their cancel "
                         f"(a cancel swallowed?): {names}")


def install() -> None:
    setattr(asyncio.runners, "_cancel_all_tasks", bounded_cancel_all_tasks)  # noqa: B010 - a private hook


def pytest_configure() -> None:
    install()
