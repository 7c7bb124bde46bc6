"""One attempt of a model call, bounded: the user's abort, the stream's idle timeout and the call's
overall deadline (docs/architecture.md "Model calls: retries and recovery").

The openai client's read timeout (600 s) is per read, so a stream that trickles or stalls could hold a
call for long; here one timer per attempt watches when the stream last brought bytes (model/sse.py
`Activity`, stamped per chunk) and cancels the attempt when it has been idle for `idle_s`, or when the
deadline passes. The timer re-arms only when it fires (no timer per chunk).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from services.runtime.model.retry_policy import DeadlineExceeded, IdleStream
from services.runtime.model.sse import ACTIVITY, Activity
from shared.contracts.records.messages import AssistantMessage


class _Watch:
    def __init__(self, task: asyncio.Future[Any], activity: Activity, idle_s: float, deadline: float | None) -> None:
        self.task = task
        self.activity = activity
        self.idle_s = idle_s
        self.deadline = deadline
        self.fired: BaseException | None = None
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_later(self._next_check(), self._check)

    def _next_check(self) -> float:
        now = self._loop.time()
        waits = [self.activity.last + self.idle_s - now] if self.idle_s > 0 else []
        if self.deadline is not None:
            waits.append(self.deadline - now)
        return max(0.0, min(waits)) if waits else 3600.0

    def _check(self) -> None:
        now = self._loop.time()
        if self.deadline is not None and now >= self.deadline:
            self.fired = DeadlineExceeded("the model call's deadline passed")
        elif self.idle_s > 0 and now - self.activity.last >= self.idle_s:
            self.fired = IdleStream(f"no data from the model for {self.idle_s:g} s")
        if self.fired is not None:
            self.task.cancel()
        else:
            self._handle = self._loop.call_later(self._next_check(), self._check)

    def stop(self) -> None:
        self._handle.cancel()


async def guarded(call: Callable[[], Coroutine[Any, Any, AssistantMessage]], signal: asyncio.Event,
                  idle_s: float = 0.0, deadline: float | None = None,
                  activity: Activity | None = None) -> AssistantMessage | None:
    """The attempt's message; None when the abort signal came first (the attempt is cancelled: its
    stream closes and gives its connection back, even while it waits for a first chunk). Raises
    `IdleStream` / `DeadlineExceeded` when the watch stopped it, and the attempt's own errors."""
    activity = activity or Activity(asyncio.get_running_loop().time())
    token = ACTIVITY.set(activity)
    try:
        task = asyncio.ensure_future(call())  # the task copies the context: its reads stamp `activity`
    finally:
        ACTIVITY.reset(token)
    watch = _Watch(task, activity, idle_s, deadline) if idle_s > 0 or deadline is not None else None
    stopper = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stopper.cancel()
        if watch is not None:
            watch.stop()
    if task.done() and not (task.cancelled() and watch is not None and watch.fired is not None):
        return task.result()
    if watch is not None and watch.fired is not None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise watch.fired
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return None
