"""Polling helpers: tests wait on observable state, never on fixed sleeps.

`eventually` (async) and `wait_sync` poll a probe until it returns something truthy and return that;
on timeout they fail naming `what`, the probe's last value and, when given, `detail()` (e.g. the
events seen so far)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _timed_out(timeout: float, what: str, last: object, detail: Callable[[], object] | None) -> AssertionError:
    more = f"; {detail()}" if detail is not None else ""
    return AssertionError(f"timed out after {timeout}s waiting for {what}; last value {last!r}{more}")


async def eventually(probe: Callable[[], Awaitable[T]], timeout: float = 20.0, interval: float = 0.05,  # noqa: ASYNC109
                     what: str = "condition", detail: Callable[[], object] | None = None) -> T:
    """Await `probe()` until it returns a truthy value; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise _timed_out(timeout, what, last, detail)


def wait_sync(probe: Callable[[], T], timeout: float = 20.0, interval: float = 0.1, what: str = "condition",
              detail: Callable[[], object] | None = None) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise _timed_out(timeout, what, last, detail)
