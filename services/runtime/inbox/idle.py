"""Idle recording with a merge window (docs/architecture.md "Delivery, yield and the idle rules").

An update (a digest, a notification: the steer and follow-up kinds) for a live agent with no run is
not held for the next prompt. Once the wake barrier has passed it waits one merge window per ref
(`MergeWindow`, the digest's debounce, from the first update of that ref): later updates of the same
ref replace it in the next-turn list as they always did (pending_queue.py `route_update`), so five
rapid edits of one ref are still one update. At the window's end the update is appended to the
transcript (fsync'd), added to the Agent's context where the next turn would have put it, and only
then acknowledged and announced as recorded (the Recorder, as for a run). An update without a ref
(a notification) has nothing to merge with and is recorded at once.

A run that starts before the window ends takes the held updates as today (the window then finds
nothing to record). Recording runs under the session's turn lock, which the inbox dispatcher holds
while it handles an entry, so no prompt is routed while an update is half recorded. A suspend
while held leaves the entries unacked: the inbox redelivers them at the next wake (or the digest
resends from its unrecorded state), as for any update held for the next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from services.runtime.engine.agent import Agent
from services.runtime.live.inbox_queue import touched_ref
from services.runtime.live.lease import LeaseLost
from services.runtime.live.state import SessionState
from services.runtime.store.transcript import Transcript
from services.runtime.turns.pending_queue import PendingQueue
from services.runtime.turns.turn_order import TurnBuilder
from shared.contracts.records.messages import AgentMessage, CustomMessage
from shared.contracts.streams.inbox import DocumentDelete, DocumentEdit, FileDelete, FileWrite, Injection
from shared.streams import causal

log = structlog.get_logger()
Clock = Callable[[], float]
Record = Callable[[AgentMessage], Awaitable[None]]
BusyRef = Callable[[str], Awaitable[bool]]
Handler = Callable[[Any, Any], Awaitable[None]]  # dispatcher.py's, for an entry and its message
WRITES = (FileWrite, FileDelete, DocumentEdit, DocumentDelete)
RETRY_S = 0.5  # a failed record (Redis, the disk) is tried again after this


class MergeWindow:
    """Per key: due `window_s` after its first update (`add`); a key `put_off` (its ref still has a
    change on its way to the digest, so another update of it is coming) is due a window later, never
    past `cap_s` after its first update. Pure: time comes from `clock`."""

    def __init__(self, window_s: float, cap_s: float, clock: Clock) -> None:
        self.window_s = window_s
        self.cap_s = max(cap_s, window_s)
        self.clock = clock
        self._first: dict[str, float] = {}
        self._due: dict[str, float] = {}
        self._version: dict[str, object] = {}

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def add(self, key: str, *, merge: bool = True, version: object = None) -> None:
        """The first update of `key` opens its window (`merge=False`: due at once). A later one (another
        `version`: it replaced the held update) restarts it, the window slides, never past `cap_s`
        after the first: a burst of edits is recorded once it has been quiet for a window."""
        now = self.clock()
        if key in self._due:
            if version is not None and self._version.get(key) != version:
                self._version[key] = version
                self._due[key] = max(self._due[key], min(now + self.window_s, self._first[key] + self.cap_s))
            return
        self._first[key] = now
        self._version[key] = version
        self._due[key] = now + (self.window_s if merge else 0.0)

    def next_due(self) -> float | None:
        return min(self._due.values(), default=None)

    def due(self) -> list[str]:
        now = self.clock()
        return [k for k, at in self._due.items() if at <= now]

    def put_off(self, key: str) -> bool:
        """Another window for `key`, within its cap. False: the cap is reached, record it now."""
        first = self._first.get(key)
        now = self.clock()
        if first is None or now + self.window_s > first + self.cap_s:
            return False
        self._due[key] = now + self.window_s
        return True

    def slide(self, key: str, delay_s: float) -> None:
        """`key` due no sooner than `delay_s` from now, within its cap (an open window only)."""
        if key in self._due:
            self._due[key] = max(self._due[key], min(self.clock() + delay_s, self._first[key] + self.cap_s))

    def retry(self, key: str, delay_s: float) -> None:
        if key in self._due:
            self._due[key] = self.clock() + delay_s

    def done(self, key: str) -> None:
        self._first.pop(key, None)
        self._due.pop(key, None)
        self._version.pop(key, None)

    def clear(self) -> None:
        self._first.clear()
        self._due.clear()
        self._version.clear()


def merge_key(m: CustomMessage) -> tuple[str, bool]:
    """(key, merges): updates of one ref share a window; any other update is its own, due at once."""
    ref = m.details.get("ref")
    if isinstance(ref, str):
        return f"ref {ref}", True
    return f"source {m.details.get('source')} {m.details.get('sourceId')}", False


def in_flight_check(client: Any, sid: str) -> BusyRef:
    """A ref with a change numbered by the proxy whose digest is not out yet (shared/streams/causal.py): its
    next update is on its way. Unknown (Redis failing, no Redis) counts as not busy."""
    async def busy(ref: str) -> bool:
        if client is None:
            return False
        try:
            return any(r == ref for _, r in await causal.in_flight(client, sid))
        except Exception:  # noqa: BLE001 - a merge window never fails a record
            return False
    return busy


class IdleRecorder:
    def __init__(self, state: SessionState, queue: PendingQueue, turns: TurnBuilder, agent: Agent,
                 transcript: Transcript, record: Record, window: MergeWindow, busy: BusyRef | None = None) -> None:
        self.state = state
        self.queue = queue  # what is held (pending_queue.py `recordable`)
        self.turns = turns  # takes it in a turn's order (turn_order.py)
        self.agent = agent
        self.transcript = transcript
        self.record = record  # Recorder.record: the transcript line, then the owner, then the acks
        self.window = window
        self.busy = busy
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def arm(self) -> None:
        """Open a window for each held update that has none. Called wherever one may be left held
        with no run to take it: after an injection is routed, at the wake barrier, as a run task ends."""
        s = self.state
        if not self.hold():
            return
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._loop())
            s.background.add(self._task)
            self._task.add_done_callback(s.background.discard)
        else:
            self._wake.set()  # an update due sooner than the one the loop sleeps for

    def written(self, ref: str) -> None:
        """A client's write of `ref` was handled: the digest will update it again (after its debounce,
        counted once the proxy has the answer), so a held update of it waits two windows from now."""
        self.window.slide(f"ref {ref}", 2 * self.window.window_s)

    def watch_writes(self, handlers: dict[type, Handler]) -> dict[type, Handler]:
        """The dispatcher's write handlers, each followed by `written` for the ref it changed."""
        def watched(handler: Handler) -> Handler:
            async def handle(entry: Any, m: Any) -> None:
                await handler(entry, m)
                self.written_entry(m)
            return handle
        return {t: watched(h) if t in WRITES else h for t, h in handlers.items()}

    def written_entry(self, m: object) -> None:
        """After the dispatcher handled an entry: a client's write (not a digest's update) slides."""
        ref = None if isinstance(m, Injection) else touched_ref(m)
        if ref is not None:
            self.written(ref)

    def _queued(self, ref: str) -> bool:
        """An entry read from the inbox but not handled yet writes or updates `ref` (it merges here):
        the proxy numbers a write only once the runtime answered it, so only the queue knows of it."""
        return self.state.queue.queued_changes(ref) > 0

    def hold(self) -> bool:
        """The windows of `arm`, without the timer (unit tests drive `flush_due` with their clock).
        True when any window is open."""
        s = self.state
        if s.closed or not s.barrier_passed or s.running:
            return False
        for m in self.queue.recordable():
            key, merge = merge_key(m)
            self.window.add(key, merge=merge, version=m.details.get("sourceId"))
        return len(self.window) > 0

    async def _loop(self) -> None:
        while not self.state.closed and (at := self.window.next_due()) is not None:
            self._wake.clear()
            delay = at - self.window.clock()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            try:
                async with self.state.turn_lock:
                    await self.flush_due()
            except LeaseLost:
                return
            except Exception as exc:  # noqa: BLE001 - put back for the next turn; tried again shortly
                log.warning("idle_record_failed", session_id=self.state.sid, error=repr(exc))
                await asyncio.sleep(RETRY_S)
                self.arm()

    async def flush_due(self) -> int:
        """Record the held updates whose window ended; returns how many messages were recorded.
        The caller holds the turn lock (no entry is handled meanwhile)."""
        s = self.state
        if s.closed or not s.barrier_passed or s.running or self.agent.is_running:
            self.window.clear()  # a run takes what is held; the run task's end arms again
            return 0
        due = self.window.due()
        if s.aborting:
            for key in due:
                self.window.retry(key, self.window.window_s)
            return 0
        chosen, later = await self._chosen(set(due))
        for key in due:
            if key not in later:
                self.window.done(key)
        return await self._record(chosen)

    async def _chosen(self, due: set[str]) -> tuple[list[CustomMessage], set[str]]:
        chosen: list[CustomMessage] = []
        later: set[str] = set()
        for m in self.queue.recordable():
            key, merge = merge_key(m)
            if key not in due:
                continue
            ref = m.details.get("ref")
            if merge and isinstance(ref, str) and await self._busy(ref) and self.window.put_off(key):
                later.add(key)  # another update of this ref is on its way: it merges into this one
                continue
            chosen.append(m)
        return chosen, later

    async def _busy(self, ref: str) -> bool:
        return self._queued(ref) or (self.busy is not None and await self.busy(ref))

    async def _record(self, chosen: list[CustomMessage]) -> int:
        messages = self.turns.take_recordable(chosen)
        for i, m in enumerate(messages):
            written = self.transcript.appended
            try:
                await self.record(m)
            except BaseException:
                if self.transcript.appended > written:  # in the transcript; only its acks failed
                    self.agent.add_idle(m)
                    i += 1
                self.turns.put_back(messages[i:])
                raise
            self.agent.add_idle(m)
        return len(messages)
