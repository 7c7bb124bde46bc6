"""A wake's steps and their timing: entry read -> lease -> disk claim -> the session's files read (in the
I/O pool: session_files.py) -> build -> restore -> SessionLive, then
(the session's own task) the live status and the inbox reader.

The steps' times are logged with `session_live` and `session_reading` (worker.py) so a bench
(bench/wake_load.py) and an operator read the wake's own latency, split by step, without a tracer: a
wake that waits behind a busy event loop shows it in the step that was running when the loop was held.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import structlog

from shared.contracts.base import now_ms
from shared.redis import keys
from shared.streams.inbox import InboxReader

if TYPE_CHECKING:
    from services.runtime.hosting.session import Session

log = structlog.get_logger()


class WakeClock:
    """Milliseconds from the wake's entry (its read from `gamma:runtime:wake`) to each step's end."""

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._last = self._start
        self.steps: dict[str, float] = {}

    def mark(self, step: str) -> None:
        """The step just ended: its own duration (from the previous mark) is kept under `step`."""
        now = time.monotonic()
        self.steps[step] = round((now - self._last) * 1000, 1)
        self._last = now

    def fields(self) -> dict[str, float]:
        """`wake_ms` (entry to now) and `<step>_ms` per marked step, for the log line."""
        return {"wake_ms": round((time.monotonic() - self._start) * 1000, 1),
                **{f"{step}_ms": ms for step, ms in self.steps.items()}}


async def start_reading(reader: InboxReader, session: Session, clock: WakeClock) -> bool:
    """After SessionLive, in the session's own task (the wake handler has returned, so the next wakes
    of its read do not wait on this): the live status (clients, the orphan scan's score), then the
    inbox, what a dead holder read but never acked first. False when the session closed meanwhile."""
    sid, fence = session.sid, session.lease.fence
    await session.outbox.event("status", {"status": "live", "running": False, "fence": fence,
                                          "viewableFiles": session.tools.viewable_files[:500]},
                               also=lambda pipe: pipe.zadd(keys.RUNTIME_LIVE, {sid: now_ms()}))
    clock.mark("status")
    pending = await reader.add(sid)
    if session.state.closed:  # its close removed the reader before this add registered it
        reader.remove(sid)
        return False
    for entry in pending:
        session.state.queue.put_nowait(entry)
    clock.mark("reader")
    log.info("session_reading", session_id=sid, fence=fence, claimed=len(pending), **clock.fields())
    return True
