"""BudgetRetry (shared/redis/reconnect.py): every attempt of a command shares one deadline, watched by one
timer per loop instead of a timer per command."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError, TimeoutError

from shared.redis.reconnect import BudgetRetry


async def _noop(*_: object) -> None:
    return None


async def test_a_reply_in_time_is_returned_and_leaves_no_cancel() -> None:
    retry = BudgetRetry(retries=0, deadline_s=5.0)

    async def do() -> str:
        await asyncio.sleep(0)
        return "ok"

    assert await retry.call_with_retry(do, _noop) == "ok"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no cancel is left pending on the caller


async def test_a_stalled_command_fails_with_redis_timeout_and_the_caller_goes_on() -> None:
    retry = BudgetRetry(retries=3, deadline_s=0.2)
    stalled = asyncio.Event()

    async def do() -> str:
        await stalled.wait()  # never set: a network that answers nothing
        return "never"

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(retry.call_with_retry(do, _noop), 10)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0.01)  # the caller is not cancelled afterwards


async def test_a_dropped_connection_is_retried_within_the_deadline() -> None:
    retry = BudgetRetry(retries=3, deadline_s=5.0)
    calls = []

    async def do() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("closed by server")
        return "ok"

    assert await retry.call_with_retry(do, _noop) == "ok"
    assert len(calls) == 2


async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    retry = BudgetRetry(retries=0, deadline_s=5.0)
    started = asyncio.Event()

    async def do() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(retry.call_with_retry(do, _noop))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
