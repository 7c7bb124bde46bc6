"""What a live session is, as data (docs/architecture.md "The runtime's parts"), in three parts, each
with one writer: the run (`RunState`, written by the run supervisor, supervisor.py), the inbox
(`InboxState`, written by the inbox dispatcher, dispatcher.py) and the lifecycle (lifecycle.py,
written by the session). Every other part reads them through `SessionState`, a read-only view: a
field no property sets cannot be moved by a reader (tests/unit/test_state_writers.py pins the
writers). None of them is a part, and no part is reached through them (Pi's AgentState)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from services.runtime.live.inbox_queue import InboxQueue
from shared.streams.inbox import InboxEntry


def _now() -> float:
    return asyncio.get_running_loop().time()


@dataclass
class RunState:
    """The run task and its ids: the run supervisor's (supervisor.py) only."""

    run_task: asyncio.Task[None] | None = None
    run_id: str | None = None  # the active run's id (events carry it; the `running` key holds it)
    last_run_id: str | None = None  # the latest run of the task (between its runs, run_id is None)
    aborting: str | None = None  # an abort (abort.py) is on: no further run starts until it is done
    ended_at: float = field(default_factory=_now)  # the last run's end (the idle clock)

    @property
    def running(self) -> bool:
        return self.run_task is not None and not self.run_task.done()


@dataclass
class InboxState:
    """What the inbox brought: the inbox dispatcher's (dispatcher.py) only. The queue is a channel:
    the session puts what the worker read (`Session.deliver`), the dispatcher takes."""

    queue: InboxQueue = field(default_factory=InboxQueue)  # read from the inbox, not handled yet
    held: list[InboxEntry] = field(default_factory=list)  # prompts held until the wake barrier
    barrier_passed: bool = False
    stop_requested: str | None = None
    stop_replies: list[str] = field(default_factory=list)  # Stop request ids, answered once the lease is released
    taken_at: float = field(default_factory=_now)  # the last entry taken (the idle clock)
    # Held by the dispatcher while it handles an entry and by idle recording (idle.py) while it records.
    turn_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Closed(Protocol):
    """The session's lifecycle (lifecycle.py) as the parts read it."""

    @property
    def closed(self) -> bool: ...


class _Open:
    closed = False


class SessionState:
    """The session's state as every part reads it: properties only, no setters."""

    def __init__(self, sid: str, wake_id: str, run: RunState | None = None, inbox: InboxState | None = None,
                 life: Closed | None = None) -> None:
        self.sid = sid
        self.wake_id = wake_id
        self._run = run or RunState()
        self._inbox = inbox or InboxState()
        self._life = life or _Open()
        # Side tasks any part registers (acks, idle recording, tool work): a close cancels them.
        self.background: set[asyncio.Task[None]] = set()

    @property
    def closed(self) -> bool:
        return self._life.closed

    @property
    def running(self) -> bool:
        return self._run.running

    @property
    def run_task(self) -> asyncio.Task[None] | None:
        return self._run.run_task

    @property
    def run_id(self) -> str | None:
        return self._run.run_id

    @property
    def last_run_id(self) -> str | None:
        return self._run.last_run_id

    @property
    def aborting(self) -> str | None:
        return self._run.aborting

    @property
    def queue(self) -> InboxQueue:
        return self._inbox.queue

    @property
    def held(self) -> tuple[InboxEntry, ...]:
        return tuple(self._inbox.held)

    @property
    def barrier_passed(self) -> bool:
        return self._inbox.barrier_passed

    @property
    def stop_requested(self) -> str | None:
        return self._inbox.stop_requested

    @property
    def stop_replies(self) -> tuple[str, ...]:
        return tuple(self._inbox.stop_replies)

    @property
    def turn_lock(self) -> asyncio.Lock:
        return self._inbox.turn_lock

    def idle_for(self) -> float:
        if self.running or self._inbox.held or not self.queue.empty():
            return 0.0
        return _now() - max(self._inbox.taken_at, self._run.ended_at)
