"""Polling helpers: tests wait on observable state, never on fixed sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T]], timeout: float = 20.0, interval: float = 0.05,  # noqa: ASYNC109
                     what: str = "condition") -> T:
    """Await `probe()` until it returns a truthy value; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value {last!r}")


def wait_sync(probe: Callable[[], T], timeout: float = 20.0, interval: float = 0.1, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value {last!r}")
