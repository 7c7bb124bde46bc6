"""The live session's workspace snapshots (shared/storage/snapshots.py; docs/architecture.md "Snapshots,
rewind and fork"): taken at each recorded user message, after each tool batch, at each run's end and
after a client's upload between runs, keyed to the transcript's leaf. Each is taken under the lease
(the scan and its writes run in the I/O pool with the disk fence held: write_guard.py) and cost a
stat per entry plus a read of each changed file. The log is read at the first snapshot, not on the
wake path. A snapshot after which the guard saw no write that may change the files (write_guard.py
`changes`) is not taken: it would find nothing changed and write nothing, and skipping it saves its
hand-off to the I/O pool and its scan (at a run's end after a run without tools, at a prompt after a
client's upload was recorded: bench/README.md "bench-e2e"). A client's write between runs and its
snapshot share one hand-off (`after_write`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import structlog

from services.runtime.store.write_guard import Guard
from shared.storage.disk import SessionPaths, storage_fault
from shared.storage.snapshots import Record, ScanTooLarge, SnapshotLimits, SnapshotStore

log = structlog.get_logger()
T = TypeVar("T")
# A client's write between runs is recorded at most this long after it (or when the session next writes
# anything, or closes): a write at the same leaf within it shares the snapshot (docs/architecture.md
# "Snapshots, rewind and fork").
UPLOAD_WINDOW_S = 2.0


def _nothing() -> None:
    return None


class SessionSnapshots:
    def __init__(self, sid: str, paths: SessionPaths, limits: SnapshotLimits, guard: Guard,
                 leaf: Callable[[], str | None]) -> None:
        self.sid = sid
        self.paths = paths
        self.limits = limits
        self._guard = guard
        self._leaf = leaf
        self._store: SnapshotStore | None = None
        self._seen: int | None = None  # the guard's `changes` the last completed scan saw
        self._pending: tuple[str | None, str] | None = None  # a put-off snapshot: (leaf, reason)
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Future[None] | None = None
        self._stopped = False
        guard.first = self._first

    @property
    def store(self) -> SnapshotStore:
        if self._store is None:
            self._store = SnapshotStore.load(self.paths, self.limits)
        return self._store

    def reload(self) -> SnapshotStore:
        self._store = self._seen = None
        return self.store

    async def take(self, reason: str, *, entry: str | None = None, force: bool = False,
                   too_large: bool = False) -> Record | None:
        """A snapshot keyed to `entry` (default: the leaf); None when nothing changed or the workspace
        is past what a snapshot records (logged: that point cannot be rewound to; the log says so, so
        no older record stands in for it). `too_large`: ScanTooLarge is raised instead (a rewind must
        know the disk's state)."""
        if not force and not too_large and self._seen is not None and self._seen == self._guard.changes:
            return None
        leaf = entry or self._leaf()

        def take() -> tuple[Record | None, int, int | None]:
            seen = self._guard.changes  # under the guard's turn: no write of this session meanwhile
            store = self.store
            record = store.take(leaf, reason, force=force)
            return record, store.prune() if record is not None else 0, seen

        self._seen = None
        try:
            record, pruned, seen = await self._guard.write(take, files=False)
        except ScanTooLarge as exc:
            log.warning("snapshot_skipped", session_id=self.sid, reason=reason, error=str(exc))
            if too_large:
                raise
            return None
        except OSError as exc:
            if storage_fault(exc) is None:
                raise
            self._disk_fault(reason, exc)
            return None
        self._taken(record, pruned, seen)
        return record

    async def after_write(self, write: Callable[[], T], reason: str, changed: Callable[[T], bool]) -> T:
        """`write` (a client's write between runs), then the snapshot that records it put off for up
        to `UPLOAD_WINDOW_S`: the next client write at the same leaf replaces it (its own snapshot
        records both), and any other write of the session (a transcript append that moves the leaf, a
        tool's, another snapshot) takes it first, in its own hand-off (write_guard.py `first`). So a
        save and a document edit between runs cost one snapshot, not two, and the put-off snapshot no
        hand-off of its own (bench/README.md "bench-e2e", fourth pass). `changed(result)` False (a
        refused write): nothing new to record. The caller has the write's result at once."""
        self._seen = None

        def put_off(result: T) -> None:  # in the I/O pool, the turn held: the leaf cannot move
            if changed(result) and not self._stopped:
                self._pending = (self._leaf(), reason)
                loop.call_soon_threadsafe(self._arm)

        loop = asyncio.get_running_loop()
        return await self._guard.write(write, after=put_off, merging=True)

    def _first(self, merging: bool) -> Callable[[], None] | None:
        """write_guard.py `first`, on the loop with the session's turn held: the put-off snapshot, to
        run before the write that holds the turn; none when a client write at its leaf will replace it."""
        pending = self._pending
        if pending is None or (merging and pending[0] == self._leaf()):
            return None
        self._pending = None
        seen = self._guard.changes  # before the write that carries it is counted
        return lambda: self._take_now(pending[0], pending[1], seen)

    def _arm(self) -> None:
        if self._timer is None and self._pending is not None:
            self._timer = asyncio.get_running_loop().call_later(UPLOAD_WINDOW_S, self._due)

    def _due(self) -> None:
        self._timer = None
        if self._pending is not None:
            self._flushing = asyncio.ensure_future(self._flush_quietly())

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # noqa: BLE001 - a lost lease or a closed session: the next holder scans
            log.warning("snapshot_flush_failed", session_id=self.sid, error=repr(exc))

    async def flush(self) -> None:
        """The put-off snapshot now (the window's end, the session's close). Through the turn even
        when none is seen: a client write's job may still be about to put one off."""
        if not self._stopped:
            await self._guard.write(_nothing, files=False)

    def stop(self) -> None:
        """The lease is gone: nothing more is written (a put-off snapshot is dropped)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = None

    def _take_now(self, leaf: str | None, reason: str, seen: int | None) -> None:
        """A put-off snapshot, in the I/O pool inside another write's hand-off: its failures are
        logged here, never raised into that write."""
        try:
            store = self.store
            record = store.take(leaf, reason)
            pruned = store.prune() if record is not None else 0
        except ScanTooLarge as exc:
            log.warning("snapshot_skipped", session_id=self.sid, reason=reason, error=str(exc))
            return
        except OSError as exc:
            if storage_fault(exc) is None:
                log.error("snapshot_failed", session_id=self.sid, reason=reason, error=repr(exc))
                self._store = None
                return
            self._disk_fault(reason, exc)
            return
        except Exception as exc:  # noqa: BLE001 - never fail the write that carries it
            log.error("snapshot_failed", session_id=self.sid, reason=reason, error=repr(exc))
            self._store = None
            return
        self._taken(record, pruned, seen)

    def _disk_fault(self, reason: str, exc: OSError) -> None:
        # A full or failing disk: this point cannot be rewound to, and the session goes on (README
        # "Reliability"). The log on disk is the truth: what the failed take half-wrote is reread.
        log.warning("snapshot_skipped_disk", session_id=self.sid, reason=reason, error=str(storage_fault(exc)))
        self._store = None

    def _taken(self, record: Record | None, pruned: int, seen: int | None) -> None:
        self._seen = seen
        if pruned:
            log.info("snapshots_pruned", session_id=self.sid, records=len(self.store.records))
