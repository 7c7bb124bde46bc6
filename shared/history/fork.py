"""Fork: a new session from a branch of another one (docs/architecture.md "Snapshots, rewind and fork").

The new session's transcript is the source's branch from the root to the entry (the entries as
stored, ids kept; found by one scan and copied by offset in slices, never the whole file in memory:
shared/history/transcript_scan.py), and its workspace, documents, todo and UI state are those of that entry, laid out
from the source's snapshot objects (shared/storage/snapshots.py), and the images its branch names are
hard-linked from the source's `.images/` (shared/media/image_gc.py): the source is only read. The new session
starts dormant with one snapshot record, keyed to the fork entry, whose objects are hard links to the
source's. Blocking: the proxy runs `plan` and `lay_out` in a thread.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.history.rewind import (
    FORK_SCOPES,
    RewindRefused,
    finish_pending_on_disk,
    record_now,
    state_record_of,
)
from shared.history.transcript_branch import timed_scan
from shared.history.transcript_scan import SLICE, Span, parse_line, read_spans
from shared.media.image_gc import IMAGE_KEY, link_referenced
from shared.storage.disk import SessionPaths, atomic_write_json
from shared.storage.snapshot_restore import MissingObject, restore
from shared.storage.snapshot_scan import object_path
from shared.storage.snapshots import Manifest, SnapshotLimits, SnapshotStore


@dataclass(frozen=True)
class ForkPlan:
    entry_id: str
    source: Path  # the source's transcript (append-only: the spans stay valid)
    spans: list[Span]  # the branch's lines in it, root first
    manifest: Manifest
    objects: Path  # the source's object store
    images: Path  # the source's images (shared/media/images.py): the branch's are linked into the fork

    def lines(self) -> Iterator[bytes]:
        """The branch's lines as stored, read in slices."""
        chunk: list[Span] = []
        size = 0
        for span in [*self.spans, None]:
            if span is None or (chunk and size + span[1] > SLICE):
                yield from read_spans(self.source, chunk)
                chunk, size = [], 0
            if span is not None:
                chunk.append(span)
                size += span[1]

    def image_lines(self) -> Iterator[dict[str, Any]]:
        """The branch's lines that can name an image, parsed: only those (image_gc.py `IMAGE_KEY`), the
        rest skipped unparsed (parsing every line of a 1 GB branch was most of a fork's time)."""
        return (d for line in self.lines() if IMAGE_KEY in line and (d := parse_line(line)) is not None)


GONE = "the session's files went away while it was forked (deleted meanwhile?); retry the fork"


def plan(src: SessionPaths, limits: SnapshotLimits, entry_id: str | None, *, dormant: bool) -> ForkPlan:
    """What the fork will hold; RewindRefused 404 (no such entry) or 409 (no snapshot kept for it, or
    the source's files went away meanwhile: a DELETE racing the fork). A dormant source first finishes
    a rewind a crash cut short, and records its disk as it is now (under the dormant-write lock the
    caller holds), so a fork of its leaf gets the latest files."""
    try:
        return _plan(src, limits, entry_id, dormant=dormant)
    except FileNotFoundError as exc:
        raise RewindRefused(409, GONE) from exc


def _plan(src: SessionPaths, limits: SnapshotLimits, entry_id: str | None, *, dormant: bool) -> ForkPlan:
    if dormant:
        finish_pending_on_disk(src, limits)
    s, times = timed_scan(src.transcript)
    leaf = s.tree.leaf
    if entry_id is None:
        entry_id = leaf
        if entry_id is None:
            raise RewindRefused(409, "the session has no transcript yet: there is nothing to fork")
    indices = s.path(entry_id)
    if not indices:
        raise RewindRefused(404, f"no entry {entry_id!r} in this session's transcript")
    store = SnapshotStore.load(src, limits)
    if dormant and entry_id == leaf:
        record_now(store, entry_id, "fork")
    nodes = [(row.id, times.get(i, 0)) for i in indices if (row := s.rows[i]) is not None and row.target is None]
    record = state_record_of(store, nodes)
    return ForkPlan(entry_id, src.transcript, [s.spans[i] for i in indices], store.manifest_of(record.n),
                    store.objects, src.images)


def _copy(fork: ForkPlan, dst: Path) -> None:
    """The branch's lines into the new transcript, a slice at a time, then fsync."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "ab") as fh:
        for line in fork.lines():
            fh.write(line + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def lay_out(fork: ForkPlan, dst: SessionPaths, limits: SnapshotLimits, default_ui: dict[str, Any]) -> None:
    """The new session's disk. On failure (an object pruned meanwhile) it is removed again."""
    try:
        for item in fork.manifest.values():
            if item.kind == "f" and not object_path(fork.objects, item.ref).exists():
                raise RewindRefused(409, "the snapshot of that entry was pruned meanwhile; retry the fork")
        dst.workspace.mkdir(parents=True, exist_ok=True)
        dst.documents.mkdir(parents=True, exist_ok=True)
        restore(dst.root, fork.objects, {}, fork.manifest, FORK_SCOPES)  # its stats: seed reads them
        if "state.json" not in fork.manifest:
            atomic_write_json(dst.state, default_ui)
        link_referenced(fork.images, dst.images, fork.image_lines())  # before the transcript names them
        _copy(fork, dst.transcript)
        SnapshotStore(dst, limits).seed(fork.manifest, fork.objects, fork.entry_id)
    except BaseException as exc:
        shutil.rmtree(dst.root, ignore_errors=True)
        if isinstance(exc, FileNotFoundError | MissingObject):  # a source object removed under us: a DELETE raced
            raise RewindRefused(409, GONE) from exc
        raise
