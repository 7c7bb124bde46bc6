"""Fork: a new session from a branch of another one (docs/architecture.md "Snapshots, rewind and fork").

The new session's transcript is the source's branch from the root to the entry (the entries as
stored, ids kept), and its workspace, documents, todo and UI state are those of that entry, laid out
from the source's snapshot objects (shared/snapshots.py), and the images its branch names are
hard-linked from the source's `.images/` (shared/image_gc.py): the source is only read. The new session
starts dormant with one snapshot record, keyed to the fork entry, whose objects are hard links to the
source's. Blocking: the proxy runs `plan` and `lay_out` in a thread.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.contracts.transcript import parse_entries
from shared.disk import SessionPaths, append_jsonl, atomic_write_json, iter_jsonl
from shared.image_gc import link_referenced
from shared.rewind import FORK_SCOPES, RewindRefused, finish_pending_on_disk, record_now, state_record
from shared.snapshot_restore import MissingObject, restore
from shared.snapshot_scan import object_path
from shared.snapshots import Manifest, SnapshotLimits, SnapshotStore
from shared.transcript_tree import active_path, path_to, row_of


@dataclass(frozen=True)
class ForkPlan:
    entry_id: str
    branch: list[dict[str, Any]]  # the transcript lines of the branch, as stored
    manifest: Manifest
    objects: Path  # the source's object store
    images: Path  # the source's images (shared/images.py): the branch's are linked into the fork


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
    raw = list(iter_jsonl(src.transcript))
    if entry_id is None:
        entry_id = _leaf(raw)
        if entry_id is None:
            raise RewindRefused(409, "the session has no transcript yet: there is nothing to fork")
    branch = path_to(raw, entry_id)
    if not branch:
        raise RewindRefused(404, f"no entry {entry_id!r} in this session's transcript")
    store = SnapshotStore.load(src, limits)
    if dormant and entry_id == _leaf(raw):
        record_now(store, entry_id, "fork")
    record = state_record(store, parse_entries(branch))
    return ForkPlan(entry_id, branch, store.manifest_of(record.n), store.objects, src.images)


def _leaf(raw: list[dict[str, Any]]) -> str | None:
    active = [row_of(e) for e in active_path(raw)]
    last = active[-1] if active else None
    if last is None:
        return None
    return last.target if last.target is not None else last.id


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
        link_referenced(fork.images, dst.images, fork.branch)  # before the transcript names them
        append_jsonl(dst.transcript, fork.branch)
        SnapshotStore(dst, limits).seed(fork.manifest, fork.objects, fork.entry_id)
    except BaseException as exc:
        shutil.rmtree(dst.root, ignore_errors=True)
        if isinstance(exc, FileNotFoundError | MissingObject):  # a source object removed under us: a DELETE raced
            raise RewindRefused(409, GONE) from exc
        raise
