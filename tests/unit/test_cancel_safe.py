"""shared/serving/cancel_safe.py: a cancel that arrives as the awaited result does is never swallowed."""

from __future__ import annotations

import asyncio

import pytest

from shared.serving.cancel_safe import wait_for


async def test_a_cancel_in_the_same_turn_as_the_result_is_delivered() -> None:
    """The race Python 3.11's own wait_for loses: the result is set and the waiting task cancelled
    before the task runs again."""
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(wait_for(fut, 10))
    await asyncio.sleep(0)  # the task waits inside wait_for
    fut.set_result(1)
    task.cancel()
    await asyncio.wait({task})
    assert task.cancelled()


async def test_results_timeouts_and_zero_timeouts_as_asyncio_defines_them() -> None:
    assert await wait_for(asyncio.sleep(0, "done"), 5) == "done"
    assert await wait_for(asyncio.sleep(0, "no bound"), None) == "no bound"
    slow = asyncio.ensure_future(asyncio.sleep(60))
    with pytest.raises(TimeoutError):
        await wait_for(slow, 0.01)
    assert slow.cancelled()  # the awaited task does not outlive the timeout
    with pytest.raises(TimeoutError):
        await wait_for(asyncio.sleep(60), 0)
    finished = asyncio.ensure_future(asyncio.sleep(0, "ready"))
    await asyncio.sleep(0.01)
    assert await wait_for(finished, 0) == "ready"


def test_installed_in_the_test_process_as_in_the_services() -> None:
    """tests/conftest.py installs it as shared/serving/service.py's serve does (Python 3.11)."""
    import sys

    if sys.version_info < (3, 12):
        assert asyncio.wait_for is wait_for and asyncio.tasks.wait_for is wait_for
