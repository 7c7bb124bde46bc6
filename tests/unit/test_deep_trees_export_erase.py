"""A session directory nested far past Python's recursion limit (a command's tree): the export skips
what lies past its depth bound and the erase removes all of it, neither recursing."""

from __future__ import annotations

import tarfile
from pathlib import Path

from services.proxy.dormant.erase import _remove_disk
from services.proxy.dormant.export import MAX_DEPTH, build
from shared.storage.disk import session_paths
from tests.hostile.trees_support import nest


def test_export_and_erase_of_a_1200_deep_workspace(tmp_path: Path) -> None:
    root = session_paths(tmp_path, "s_deep").root
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "top.txt").write_text("t")
    nest(workspace, "d", 1200)
    archive = build(root, "s_deep", b"{}", 10**6, tmp_path / "spool")
    with tarfile.open(fileobj=archive, mode="r:gz") as tar:
        names = tar.getnames()
    assert "s_deep/workspace/top.txt" in names
    deepest = max(n.count("/") for n in names)
    assert deepest <= MAX_DEPTH + 2  # sid/workspace/ + at most MAX_DEPTH nested directories
    _remove_disk(tmp_path, "s_deep")
    assert not root.exists() and list((tmp_path / ".trash").iterdir()) == []
