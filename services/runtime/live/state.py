"""What a live session is, as data (docs/architecture.md "The runtime's parts"): its ids, the wake
barrier, the prompts held for it, Stop, the run task and its ids. The parts read and move these
fields; none of them is a part, and no part is reached through it (Pi's AgentState)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.runtime.live.inbox_queue import InboxQueue
from shared.streams.inbox import InboxEntry


@dataclass
class SessionState:
    sid: str
    wake_id: str
    queue: InboxQueue = field(default_factory=InboxQueue)  # read from the inbox, not handled yet
    held: list[InboxEntry] = field(default_factory=list)  # prompts held until the wake barrier
    barrier_passed: bool = False
    closed: bool = False
    stop_requested: str | None = None
    stop_replies: list[str] = field(default_factory=list)  # Stop request ids, answered once the lease is released
    last_activity: float = field(default_factory=lambda: asyncio.get_running_loop().time())
    loop_task: asyncio.Task[None] | None = None  # the inbox loop (dispatcher.py)
    background: set[asyncio.Task[None]] = field(default_factory=set)
    run_task: asyncio.Task[None] | None = None  # the run task (supervisor.py)
    run_id: str | None = None  # the active run's id (events carry it; the `running` key holds it)
    last_run_id: str | None = None  # the latest run of the task (between its runs, run_id is None)
    aborting: str | None = None  # set by an abort (abort.py): no further run starts until it is done
    # Held by the dispatcher while it handles an entry and by idle recording (idle.py) while it records.
    turn_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def running(self) -> bool:
        return self.run_task is not None and not self.run_task.done()

    def touch(self) -> None:
        self.last_activity = asyncio.get_running_loop().time()

    def idle_for(self) -> float:
        if self.running or self.held or not self.queue.empty():
            return 0.0
        return asyncio.get_running_loop().time() - self.last_activity
