"""A cancel is never lost inside `asyncio.wait_for` (Python 3.11).

Python 3.11's `asyncio.wait_for` returns the awaited result when the task is cancelled in the same
loop iteration as that result arrives (`except CancelledError: if fut.done(): return fut.result()`):
the cancel is swallowed, and a background loop (`while True: await ...`) runs on as if nothing
happened. redis-py wraps every command's send in `wait_for` when the client has a socket timeout (all
of ours, shared/redis/reconnect.py), so about one cancel in three that lands while a loop talks to Redis was
lost: a service's shutdown then waited out its bound on the background task (shared/serving/service.py) and a
test's event-loop teardown hung. Python 3.12 rebuilt `wait_for` on `asyncio.timeout`, which delivers
every cancel; `install()` puts that implementation in place on 3.11, once per process (the services'
`serve`, the test suite's conftest).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_for(fut: Awaitable[T], timeout: float | None) -> T:  # noqa: ASYNC109 - wait_for's own signature
    """Python 3.12's `asyncio.wait_for`: the awaitable under `asyncio.timeout`, so a cancel of the
    caller always raises CancelledError in it."""
    if timeout is not None and timeout <= 0:
        task = asyncio.ensure_future(fut)
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.wait({task})
        try:
            return task.result()
        except asyncio.CancelledError as exc:
            raise TimeoutError from exc
    async with asyncio.timeout(timeout):
        return await fut


def install() -> None:
    """On Python < 3.12 replace `asyncio.wait_for` (for every library that calls it through the
    module, redis-py included) with `wait_for` above; on 3.12+ the standard one already is."""
    if sys.version_info >= (3, 12):
        return
    patched: Any = wait_for
    asyncio.wait_for = patched
    asyncio.tasks.wait_for = patched
