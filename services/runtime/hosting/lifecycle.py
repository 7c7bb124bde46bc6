"""A live session's lifecycle, as a closed state machine: the session (session.py) is its only
writer, every other part reads `closed` (state.py `SessionState`) and the write guard reads
`writable` (write_guard.py).

    opening ──> live ──> stopping ──> sealing ──> closed
       │          │          │           │
       └──────────┴──────────┴───────────┴──────> dropped      (the lease was taken)
    opening ──> closed                                         (the wake failed)

- opening: built from the disk, restoring; writes go through, no inbox entry is taken yet;
- live: announced (SessionLive): the inbox loop runs, runs start;
- stopping: a close stops the run and the background tasks (their last writes and status events
  still go out);
- sealing: the loops see the session closed (no entry is taken, no run goes on) while the close
  makes its own last writes (the UI state) under the lease;
- closed: the lease is released: nothing more is written;
- dropped: the lease was taken by another holder: nothing more is written or announced.
"""

from __future__ import annotations

import asyncio
from enum import StrEnum


class Phase(StrEnum):
    OPENING = "opening"
    LIVE = "live"
    STOPPING = "stopping"
    SEALING = "sealing"
    CLOSED = "closed"
    DROPPED = "dropped"


MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.OPENING: frozenset({Phase.LIVE, Phase.STOPPING, Phase.CLOSED, Phase.DROPPED}),
    Phase.LIVE: frozenset({Phase.STOPPING, Phase.DROPPED}),
    Phase.STOPPING: frozenset({Phase.SEALING, Phase.DROPPED}),
    Phase.SEALING: frozenset({Phase.CLOSED, Phase.DROPPED}),
    Phase.CLOSED: frozenset(),
    Phase.DROPPED: frozenset(),
}
WRITABLE = frozenset({Phase.OPENING, Phase.LIVE, Phase.STOPPING, Phase.SEALING})
CLOSED = frozenset({Phase.SEALING, Phase.CLOSED, Phase.DROPPED})
ENDED = frozenset({Phase.CLOSED, Phase.DROPPED})


class BadMove(RuntimeError):
    """A move the lifecycle does not have (a bug: a session closed twice, reopened)."""


class Lifecycle:
    def __init__(self) -> None:
        self._phase = Phase.OPENING
        self._loop_task: asyncio.Task[None] | None = None  # the inbox loop (worker.py `_session_loop`)

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def closed(self) -> bool:
        """No inbox entry is taken and no run goes on (the loops end)."""
        return self._phase in CLOSED

    @property
    def writable(self) -> bool:
        """The session may still write (write_guard.py checks the lease besides)."""
        return self._phase in WRITABLE

    @property
    def ended(self) -> bool:
        return self._phase in ENDED

    @property
    def loop_task(self) -> asyncio.Task[None] | None:
        return self._loop_task

    def move(self, to: Phase) -> Phase:
        """Move to `to`; returns the phase left. Raises BadMove for a move the machine lacks."""
        left = self._phase
        if to not in MOVES[left]:
            raise BadMove(f"{left} -> {to}")
        self._phase = to
        return left

    def live(self, loop_task: asyncio.Task[None]) -> None:
        """Announced: the inbox loop is the session's from now on (cancelled by its close)."""
        self.move(Phase.LIVE)
        self._loop_task = loop_task

    def stop(self) -> bool:
        """A close begins; False when the session has already ended or is ending (closed or dropped)."""
        if self._phase not in (Phase.OPENING, Phase.LIVE):
            return False
        self.move(Phase.STOPPING)
        return True

    def drop(self) -> bool:
        """The lease is lost; False when the session had already ended."""
        if self.ended:
            return False
        self.move(Phase.DROPPED)
        return True
