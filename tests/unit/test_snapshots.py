"""Workspace snapshots on a real disk (shared/storage/snapshots.py): content-addressed, O(changed), restorable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.history.rewind import RewindRefused, record_now, state_record
from shared.settings import Settings
from shared.storage.disk import session_paths
from shared.storage.snapshot_restore import restore
from shared.storage.snapshots import ScanTooLarge, SnapshotLimits, SnapshotStore

SCOPES = ("workspace/", "documents/", "todo.json")


def objects(store: SnapshotStore) -> int:
    return sum(len(files) for _, _, files in os.walk(store.objects))


def session(tmp_path: Path, files: int) -> SnapshotStore:
    paths = session_paths(tmp_path, "s1")
    (paths.workspace / "src").mkdir(parents=True)
    for i in range(files):
        (paths.workspace / "src" / f"f{i}.txt").write_text(f"content {i}\n")
    return SnapshotStore.load(paths, SnapshotLimits())


def test_one_changed_file_per_batch_stores_one_object(tmp_path: Path) -> None:
    store = session(tmp_path, 1000)
    store.take("e0", "prompt")
    base, log_size = objects(store), store.log.stat().st_size
    for batch in range(20):
        (store.paths.workspace / "src" / f"f{batch}.txt").write_text(f"changed {batch}\n")
        record = store.take(f"e{batch + 1}", "batch")
        assert record is not None and len(record.set) == 1
    assert objects(store) == base + 20
    # the log grows by about a line per batch, plus at most one full manifest over the 20 batches
    assert store.log.stat().st_size - log_size < 2 * log_size


def test_nothing_changed_writes_nothing(tmp_path: Path) -> None:
    store = session(tmp_path, 3)
    store.take("e0", "prompt")
    assert store.take("e1", "batch") is None


def test_restore_puts_back_files_and_removes_new_ones(tmp_path: Path) -> None:
    store = session(tmp_path, 3)
    ws = store.paths.workspace
    first = store.take("e0", "prompt")
    assert first is not None
    (ws / "src" / "f1.txt").write_text("edited by bash\n")
    (ws / "new").mkdir()
    (ws / "new" / "made.txt").write_text("new file\n")
    (ws / "link").symlink_to("/etc/passwd")
    os.remove(ws / "src" / "f2.txt")
    store.take("e1", "batch")
    restored = restore(store.paths.root, store.objects, store.current, store.manifest_of(first.n), SCOPES)
    assert restored.changed >= 4
    assert (ws / "src" / "f1.txt").read_text() == "content 1\n"
    assert (ws / "src" / "f2.txt").read_text() == "content 2\n"
    assert not (ws / "new").exists() and not os.path.lexists(ws / "link")
    store.adopt(restored.manifest, "e0", "rewind")
    assert store.take("e0", "check") is None, "the adopted stats match the disk: nothing to read again"
    after = SnapshotStore.load(store.paths, SnapshotLimits())
    assert after.current == store.current  # the log replays to the same manifest (a wake)


def test_prune_keeps_the_newest_and_removes_unnamed_objects(tmp_path: Path) -> None:
    store = session(tmp_path, 2)
    store.limits = SnapshotLimits(max_records=10)
    for i in range(30):
        (store.paths.workspace / "src" / "f0.txt").write_text(f"v{i}\n")
        store.take(f"e{i}", "batch")
    dropped = store.prune()
    assert dropped > 0 and len(store.records) <= 10 and store.records[0].full
    assert objects(store) <= len(store.records) + 2
    last = store.records[-1]
    assert store.manifest_of(last.n) == store.current


def test_the_bytes_stored_follow_takes_prunes_and_a_reload(tmp_path: Path) -> None:
    """`bytes_stored` (checked by every take's prune) is kept as records come and go, not summed over
    the log each time, and matches the log's records after each step and after a reload."""
    store = session(tmp_path, 1)
    store.limits = SnapshotLimits(max_bytes=400)
    for i in range(40):
        (store.paths.workspace / "src" / "f0.txt").write_text(f"version {i:03d}\n" * 4)
        store.take(f"e{i}", "batch")
        store.prune()
        assert store.bytes_stored() == sum(r.added for r in store.records) <= 400
    reloaded = SnapshotStore.load(store.paths, store.limits)
    assert reloaded.bytes_stored() == store.bytes_stored() > 0


def test_snapshots_scale_to_the_workspace_entry_quota() -> None:
    """Before: 2 x GAMMA_WORKSPACE_MAX_FILES + 1000 (5,000) entries against a 10,000-entry quota."""
    settings = Settings()
    limits = SnapshotLimits.of(settings)
    assert limits.max_entries >= settings.storage.workspace_max_entries + 1000
    assert limits.max_depth == settings.storage.workspace_max_depth


def test_a_point_past_the_bound_is_refused_never_restored_from_an_older_one(tmp_path: Path) -> None:
    """docs/architecture.md "Snapshots, rewind and fork": a state that could not be recorded is never
    stood in for by an older record (the rewind said `changed: 0` and the model was told files were back)."""
    paths = session_paths(tmp_path, "s1")
    (paths.workspace / "src").mkdir(parents=True)
    (paths.workspace / "src" / "a.txt").write_text("one")
    store = SnapshotStore.load(paths, SnapshotLimits(max_entries=20))
    store.take("e0", "prompt")
    for i in range(30):
        (paths.workspace / "src" / f"f{i}").write_text("x")
    with pytest.raises(ScanTooLarge):
        store.take("e1", "batch")
    reloaded = SnapshotStore.load(paths, store.limits)

    class Node:
        def __init__(self, id: str) -> None:
            self.id, self.timestamp = id, "2030-01-01T00:00:00.000Z"

    with pytest.raises(RewindRefused) as refused:
        state_record(reloaded, [Node("e0"), Node("e1")])  # type: ignore[list-item]
    assert refused.value.status == 409 and "20 entries" in refused.value.message
    assert state_record(reloaded, [Node("e0")]).entry == "e0"  # type: ignore[list-item]
    with pytest.raises(RewindRefused) as now:
        record_now(reloaded, "e1", "rewind_from")
    assert now.value.status == 409 and now.value.detail == {"bound": 20}


def test_modes_are_recorded_and_restored_without_setuid_setgid_or_sticky(tmp_path: Path) -> None:
    store = session(tmp_path, 1)
    ws = store.paths.workspace
    (ws / "suid").write_text("#!/bin/sh\nid\n")
    os.chmod(ws / "suid", 0o6755)
    (ws / "sticky").mkdir()
    os.chmod(ws / "sticky", 0o1777)
    first = store.take("e0", "prompt")
    assert first is not None
    assert store.current["workspace/suid"].mode == 0o755 and store.current["workspace/sticky"].mode == 0o777
    # A record written before the masking still holds the bits: the restore drops them.
    target = dict(store.manifest_of(first.n))
    target["workspace/suid"] = target["workspace/suid"]._replace(mode=0o6755)
    os.remove(ws / "suid")
    os.rmdir(ws / "sticky")
    store.take("e1", "batch")
    restore(store.paths.root, store.objects, store.current, target, SCOPES)
    assert os.stat(ws / "suid").st_mode & 0o7777 == 0o755
    assert not os.stat(ws / "sticky").st_mode & 0o7000
