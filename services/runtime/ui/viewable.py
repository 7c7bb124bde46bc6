"""The viewable-files projection, kept live (seed: agent-server "rebuilds server-owned projections
such as viewable files and cost state from their authoritative sources"; docs/architecture.md
"Viewable files and cost records").

The source is the workspace. The list is built by a bounded walk at the wake (sent whole in the
`status` event) and after a rewind, then kept by every file change: the agent's (write, edit, a
command's changes) and a client's live write or delete (writes.py). Each change is sent to the
clients as a `viewable_files` event with what was added and removed, so a file tree stays current
without a wake. Changes within `DELAY_S` are sent as one event (a command that makes a thousand files
sends one, not a thousand); a list too long for one event says `truncated` (list the workspace).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

DELAY_S = 0.05
MAX_LISTED = 500  # paths per event; past it the event says `truncated`
Publish = Callable[[dict[str, Any]], Awaitable[object]]


def event_data(files: list[str], added: set[str], removed: set[str], full: bool = False) -> dict[str, Any]:
    """The `viewable_files` event (shared/contracts/streams/events.py ViewableFilesData)."""
    listed = sorted(added)[:MAX_LISTED], sorted(removed)[:MAX_LISTED]
    data: dict[str, Any] = {"added": listed[0], "removed": listed[1], "count": len(files),
                            "truncated": len(added) > MAX_LISTED or len(removed) > MAX_LISTED}
    if full:
        data["viewableFiles"] = files[:MAX_LISTED]
        data["truncated"] = len(files) > MAX_LISTED
    return data


class ViewableFiles:
    def __init__(self, publish: Publish, background: set[asyncio.Task[None]], delay_s: float = DELAY_S) -> None:
        self.files: list[str] = []
        self._publish = publish
        self._background = background
        self._delay_s = delay_s
        self._added: set[str] = set()
        self._removed: set[str] = set()
        self._flush: asyncio.Task[None] | None = None

    def replace(self, files: list[str]) -> None:
        """The projection from a walk (the wake, whose `status` event carries it): no delta to send."""
        self.files = files
        self._added.clear()
        self._removed.clear()

    async def replaced(self, files: list[str]) -> None:
        """A walk after the files changed under the clients (a rewind): the whole list is sent."""
        self.replace(files)
        await self._publish(event_data(files, set(), set(), full=True))

    def track(self, *paths: str, deleted: bool = False) -> None:
        before = set(self.files)
        if deleted:
            gone = before & set(paths)
            if not gone:
                return
            self.files = [p for p in self.files if p not in gone]
            self._removed |= gone - self._added
            self._added -= gone
        else:
            new = set(paths) - before
            if not new:
                return
            self.files = sorted(before | new)
            self._added |= new - self._removed
            self._removed -= new
        self._schedule()

    def _schedule(self) -> None:
        if self._flush is not None and not self._flush.done():
            return
        try:
            task = asyncio.get_running_loop().create_task(self._send_later())
        except RuntimeError:  # no loop (a synchronous caller in a test): the next change sends it
            return
        self._flush = task
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send_later(self) -> None:
        # Loop, not one send: a change tracked while the event is being published finds this task
        # not done, so `_schedule` leaves it to this task; a single send would strand it until the
        # next change, which may never come (a command waiting on the user).
        while self._added or self._removed:
            await asyncio.sleep(self._delay_s)
            await self.send()

    async def send(self) -> None:
        """What changed since the last event, now (nothing: no event)."""
        if not (self._added or self._removed):
            return
        added, removed, self._added, self._removed = self._added, self._removed, set(), set()
        await self._publish(event_data(self.files, added, removed))
