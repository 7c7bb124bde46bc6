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

from collections.abc import Callable
from typing import TypeVar

import structlog

from services.runtime.store.write_guard import Guard
from shared.storage.disk import SessionPaths, storage_fault
from shared.storage.snapshots import Record, ScanTooLarge, SnapshotLimits, SnapshotStore

log = structlog.get_logger()
T = TypeVar("T")


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

    async def client_write(self, write: Callable[[], T], changed: Callable[[T], bool],
                           running: Callable[[], bool]) -> T:
        """A client's write: between runs a point to return to (`after_write`); during a run the next
        batch records it, unless the run ended meanwhile."""
        if not running():
            return await self.after_write(write, "upload", changed)
        result = await self._guard.write(write)
        if not running() and changed(result):
            await self.take("upload")
        return result

    async def after_write(self, write: Callable[[], T], reason: str, changed: Callable[[T], bool]) -> T:
        """`write` (a client's write between runs), then the snapshot that records it, in one hand-off
        to the I/O pool with the fence held throughout (write_guard.py `after`): the caller has the
        write's result (and answers it) while the snapshot is taken, and one fence check serves both.
        `changed(result)` False (a refused write): no snapshot. The snapshot's failures are logged as
        `take`'s are; an unexpected one as well, since nobody awaits it."""
        leaf = self._leaf()
        self._seen = None

        def take(result: T) -> None:  # in the I/O pool, the fence held
            if not changed(result):
                return
            seen = self._guard.changes
            try:
                store = self.store
                record = store.take(leaf, reason)
                pruned = store.prune() if record is not None else 0
            except ScanTooLarge as exc:
                log.warning("snapshot_skipped", session_id=self.sid, reason=reason, error=str(exc))
                return
            except OSError as exc:
                if storage_fault(exc) is None:
                    raise
                self._disk_fault(reason, exc)
                return
            self._taken(record, pruned, seen)

        return await self._guard.write(write, after=take)

    def _disk_fault(self, reason: str, exc: OSError) -> None:
        # A full or failing disk: this point cannot be rewound to, and the session goes on (README
        # "Reliability"). The log on disk is the truth: what the failed take half-wrote is reread.
        log.warning("snapshot_skipped_disk", session_id=self.sid, reason=reason, error=str(storage_fault(exc)))
        self._store = None

    def _taken(self, record: Record | None, pruned: int, seen: int | None) -> None:
        self._seen = seen
        if pruned:
            log.info("snapshots_pruned", session_id=self.sid, records=len(self.store.records))
