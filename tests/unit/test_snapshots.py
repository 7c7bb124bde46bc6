"""Workspace snapshots on a real disk (shared/snapshots.py): content-addressed, O(changed), restorable."""

from __future__ import annotations

import os
from pathlib import Path

from shared.disk import session_paths
from shared.snapshot_restore import restore
from shared.snapshots import SnapshotLimits, SnapshotStore

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
