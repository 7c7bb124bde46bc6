"""Workspace snapshots: the session's files, documents, todo and UI state at every point a user can
return to (docs/architecture.md "Snapshots, rewind and fork").

Under `sessions/{sid}/.snapshots/`: `objects/` holds each content once, by sha256 (like git's
objects), and `log.jsonl` one record per snapshot: the transcript entry it belongs to, and what
changed since the record before it (a delta), or, every so often, the whole manifest (a full record:
written when the deltas since the last full one add up to the manifest's size, so a replay reads at
most about two manifests and the log grows by O(files changed) per snapshot). A snapshot in which
nothing changed writes nothing.

Retention (settings `GAMMA_SNAPSHOT_RETENTION_S`, `GAMMA_SNAPSHOT_MAX_BYTES`, `GAMMA_SNAPSHOT_MAX_RECORDS`):
the oldest records go first; the new first record is rewritten full, and objects no retained record
names are removed. One writer at a time: the lease holder, or the proxy under the dormant-write lock.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from shared.storage.disk import SessionPaths, append_jsonl, atomic_write_bytes, iter_jsonl
from shared.storage.pathnames import show, unshow
from shared.storage.snapshot_scan import (
    MAX_DEPTH,
    Item,
    Manifest,
    ObjectWriter,
    ScanTooLarge,
    object_path,
    scan_session,
)

EXTRA_ENTRIES = 1000  # beside the workspace: documents, todo.json, state.json
__all__ = ["Item", "Manifest", "Record", "ScanTooLarge", "SnapshotLimits", "SnapshotStore"]


@dataclass(frozen=True)
class SnapshotLimits:
    max_age_s: float = 7 * 24 * 3600.0
    max_bytes: int = 512 * 1024 * 1024
    max_records: int = 2000
    max_entries: int = 20_000  # files, directories and links in one snapshot
    max_depth: int = MAX_DEPTH

    @classmethod
    def of(cls, settings: Any) -> SnapshotLimits:
        """Snapshots scale to the workspace's own bounds (its entry quota and depth, plus the documents,
        todo and UI state beside it), so a workspace within its quota is always recorded: a rewind never
        restores an older state in place of one it could not record."""
        storage = settings.storage
        entries = max(storage.workspace_max_entries, storage.workspace_max_files * 2) + EXTRA_ENTRIES
        return cls(storage.snapshot_retention_s, storage.snapshot_max_bytes, storage.snapshot_max_records,
                   entries, storage.workspace_max_depth)


class Record(BaseModel):
    n: int  # its place in the log, from 0, never reused
    entry: str | None  # the transcript entry that was the leaf when it was taken
    at: int  # epoch milliseconds
    reason: str
    full: bool = False
    set: dict[str, list[Any]] = Field(default_factory=dict)  # key -> Item fields
    gone: list[str] = Field(default_factory=list)
    added: int = 0  # bytes of objects it stored first
    # Keys and link targets are shown names (shared/storage/pathnames.py). A record written before that rule
    # (shown False) held them raw: `load` shows them, which changes only a name with a backslash or a
    # control character (one that was not UTF-8 could not be written at all).
    shown: bool = True
    # Set when the disk could not be recorded at this point (past the snapshot bound): the record holds
    # the state before it (a base for later deltas), and a rewind or fork to it is refused, naming why.
    unrecorded: str | None = None

    def items(self) -> dict[str, Item]:
        return {k: Item(*v) for k, v in self.set.items()}

    def as_shown(self) -> Record:
        if self.shown:
            return self
        return self.model_copy(update={
            "shown": True, "gone": [show(k) for k in self.gone],
            "set": {show(k): [v[0], show(v[1]) if v[0] == "l" else v[1], *v[2:]] for k, v in self.set.items()}})


def _now_ms() -> int:
    return int(time.time() * 1000)


def _apply(manifest: Manifest, record: Record) -> Manifest:
    if record.full:
        return record.items()
    out = dict(manifest)
    for key in record.gone:
        out.pop(key, None)
    out.update(record.items())
    return out


class SnapshotStore:
    """The log and objects of one session. `load` reads the log once; `take` appends to it."""

    def __init__(self, paths: SessionPaths, limits: SnapshotLimits) -> None:
        self.paths = paths
        self.limits = limits
        self.dir = paths.root / ".snapshots"
        self.log = self.dir / "log.jsonl"
        self.objects = self.dir / "objects"
        self.records: list[Record] = []
        self.current: Manifest = {}  # the manifest of the newest record
        self._since_full = 0  # delta items written since the last full record
        self._bytes = 0  # the sum of the records' `added`: checked at every take (prune), kept, not summed

    @classmethod
    def load(cls, paths: SessionPaths, limits: SnapshotLimits) -> SnapshotStore:
        store = cls(paths, limits)
        for raw in iter_jsonl(store.log):
            with contextlib.suppress(ValueError):
                if isinstance(raw, dict) and "shown" not in raw:
                    raw = {**raw, "shown": False}
                store.records.append(Record.model_validate(raw).as_shown())
        for rec in store.records:
            store._bytes += rec.added
            store.current = _apply(store.current, rec)
            store._since_full = 0 if rec.full else store._since_full + len(rec.set) + len(rec.gone)
        return store

    # ------------------------------------------------------------ taking

    def take(self, entry: str | None, reason: str, *, force: bool = False) -> Record | None:
        """Record the disk as it is now, keyed to `entry`; None when nothing changed (unless `force`)."""
        writer = ObjectWriter(self.objects)
        try:
            scan = scan_session(self.paths.root, self.current, writer.store, self.limits.max_entries,
                                self.limits.max_depth)
            writer.commit()
        except ScanTooLarge as exc:
            self._unrecorded(entry, reason, str(exc))
            raise
        finally:
            writer.discard()  # a scan that failed leaves no temp copies behind
        return self._record(scan.manifest, entry, reason, scan.added_bytes, force=force)

    def _unrecorded(self, entry: str | None, reason: str, why: str) -> None:
        """A record saying the state at `entry` is not kept (so no older record stands in for it)."""
        if not self.records or entry is None:
            return  # nothing older could stand in for it, or no entry to key it to
        last = self.records[-1]
        if last.entry == entry and last.unrecorded is not None:
            return  # said already
        self._append(Record(n=last.n + 1, entry=entry, at=_now_ms(), reason=reason, unrecorded=why))

    def adopt(self, manifest: Manifest, entry: str | None, reason: str) -> Record | None:
        """Record `manifest` as the disk's state without reading the disk again: the caller just made
        the disk match it (a restore), and gives each entry it wrote its new stat."""
        return self._record(manifest, entry, reason, 0, force=True)

    def _record(self, manifest: Manifest, entry: str | None, reason: str, added: int, *, force: bool) -> Record | None:
        changed = {k: v for k, v in manifest.items() if self.current.get(k) != v}
        gone = [k for k in self.current if k not in manifest]
        if not changed and not gone and not force and self.records:
            return None
        n = self.records[-1].n + 1 if self.records else 0
        full = not self.records or self._since_full + len(changed) + len(gone) >= max(len(manifest), 64)
        record = Record(n=n, entry=entry, at=_now_ms(), reason=reason, full=full,
                        set={k: list(v) for k, v in (manifest if full else changed).items()},
                        gone=[] if full else gone, added=added)
        self._append(record)
        self.current = manifest
        self._since_full = 0 if full else self._since_full + len(changed) + len(gone)
        return record

    def _append(self, record: Record) -> None:
        append_jsonl(self.log, [record.model_dump(mode="json")])
        self.records.append(record)
        self._bytes += record.added

    # ------------------------------------------------------------ reading

    def manifest_of(self, n: int) -> Manifest:
        """The whole manifest of record `n`: from the last full record at or before it, deltas applied."""
        index = next(i for i, r in enumerate(self.records) if r.n == n)
        start = index
        while start > 0 and not self.records[start].full:
            start -= 1
        manifest: Manifest = {}
        for rec in self.records[start:index + 1]:
            manifest = _apply(manifest, rec)
        return manifest

    def newest_by_entry(self) -> dict[str, Record]:
        out: dict[str, Record] = {}
        for rec in self.records:
            if rec.entry is not None:
                out[rec.entry] = rec
        return out

    def record_for(self, path: list[tuple[str, int]]) -> Record | None:
        """The record that holds the state at the last entry of `path` ((entry id, epoch ms) from the
        root): that entry's newest record, else the newest record of the nearest entry before it on the
        path that was taken no later than the target entry was written (a later one belongs to a
        rewind back there, after the target's branch was left)."""
        if not path:
            return None
        by_entry: dict[str, list[Record]] = {}
        for rec in self.records:
            if rec.entry is not None:
                by_entry.setdefault(rec.entry, []).append(rec)
        target, written = path[-1]
        own = by_entry.get(target)
        if own:
            return own[-1]
        for entry_id, _ in reversed(path[:-1]):
            earlier = [r for r in by_entry.get(entry_id, []) if r.at <= written]
            if earlier:
                return earlier[-1]
            if by_entry.get(entry_id):
                return None  # only records from after the target: the ones before it were pruned
        return None

    def oldest_entry(self) -> str | None:
        return next((r.entry for r in self.records if r.entry is not None), None)

    def read_object(self, digest: str) -> Path:
        return object_path(self.objects, digest)

    # ------------------------------------------------------------ retention

    def bytes_stored(self) -> int:
        return self._bytes

    def prune(self, now_ms: int | None = None) -> int:
        """Drop the oldest records past the limits (to 80% of them, so pruning is rare); returns how many."""
        if not self.records:
            return 0
        now_ms = now_ms if now_ms is not None else _now_ms()
        keep_from = self._keep_from(now_ms)
        if keep_from == 0:
            return 0
        first = self.records[keep_from]
        rebased = first.model_copy(update={"full": True, "gone": [],
                                           "set": {k: list(v) for k, v in self.manifest_of(first.n).items()}})
        kept = [rebased, *self.records[keep_from + 1:]]
        payload = b"".join(rec.model_dump_json().encode() + b"\n" for rec in kept)
        atomic_write_bytes(self.log, payload)
        self.records = kept
        self._bytes = sum(r.added for r in kept)
        self._collect()
        return keep_from

    def _keep_from(self, now_ms: int) -> int:
        lim = self.limits
        over = (len(self.records) > lim.max_records or self.bytes_stored() > lim.max_bytes
                or now_ms - self.records[0].at > lim.max_age_s * 1000)
        if not over or len(self.records) < 2:
            return 0
        last = len(self.records) - 1
        keep_from, total = last, 0
        for i in range(last, -1, -1):
            rec = self.records[i]
            total += rec.added
            if (last - i + 1 > lim.max_records * 0.8 or total > lim.max_bytes * 0.8
                    or now_ms - rec.at > lim.max_age_s * 1000 * 0.8):
                break
            keep_from = i
        return keep_from

    def _collect(self) -> None:
        """Remove objects no retained record names (the first record is full: it names its state)."""
        named = {v[1] for rec in self.records for v in rec.set.values() if v[0] == "f"}
        if not self.objects.is_dir():
            return
        with os.scandir(self.objects) as top:
            prefixes = [e.path for e in top if e.is_dir(follow_symlinks=False)]
        for prefix in prefixes:
            with os.scandir(prefix) as it:
                for obj in it:
                    if Path(prefix).name + obj.name not in named:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(obj.path)

    # ------------------------------------------------------------ a fork's first record

    def seed(self, manifest: Manifest, source_objects: Path, entry: str, reason: str = "fork") -> Record:
        """A new session's first record, for a disk just laid out from `manifest` (shared/history/fork.py):
        the source's objects are hard-linked (they are never written in place), and each file's stat
        is read from the new disk, so the next snapshot finds nothing changed without reading a file."""
        items: Manifest = {}
        added = 0
        dirs: set[Path] = set()
        for key, item in manifest.items():
            if item.kind != "f":
                items[key] = item
                continue
            target = object_path(self.objects, item.ref)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(object_path(source_objects, item.ref), target)
                except OSError:
                    atomic_write_bytes(target, object_path(source_objects, item.ref).read_bytes())
                dirs.add(target.parent)
                added += item.size
            st = os.lstat(self.paths.root / unshow(key))
            items[key] = Item("f", item.ref, st.st_size, item.mode, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        for d in dirs:  # the links are durable before the record names them
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        record = Record(n=0, entry=entry, at=_now_ms(), reason=reason, full=True,
                        set={k: list(v) for k, v in items.items()}, added=added)
        self._append(record)
        self.current = items
        return record
