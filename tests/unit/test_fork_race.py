"""A fork racing a DELETE of its source (shared/history/fork.py; docs/architecture.md "Snapshots, rewind and fork").

Before: the source's files removed between the fork's steps surfaced as FileNotFoundError, a 500. After:
a RewindRefused 409 (the proxy answers 404 when the source's row is gone or deleting). The deletion is
played at the exact step the race hits: the tests wrap that step.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shared.history import fork
from shared.history.rewind import RewindRefused
from shared.storage.disk import SessionPaths, session_paths
from shared.storage.snapshots import SnapshotLimits, SnapshotStore

HEADER = {"id": "h0000001", "timestamp": "2030-01-01T00:00:00.000Z", "type": "session", "version": 3}
PROMPT = {"id": "m0000001", "parentId": "h0000001", "timestamp": "2030-01-01T00:00:01.000Z", "type": "message",
          "message": {"role": "user", "content": "hello", "timestamp": 1}}


def source(tmp_path: Path) -> SessionPaths:
    src = session_paths(tmp_path, "s_src")
    src.workspace.mkdir(parents=True)
    (src.workspace / "a.txt").write_text("a")
    src.transcript.write_text(json.dumps(HEADER) + "\n" + json.dumps(PROMPT) + "\n")
    SnapshotStore.load(src, SnapshotLimits()).take("m0000001", "prompt")
    return src


def deleting_first(step: Callable[..., Any], root: Path) -> Callable[..., Any]:
    def raced(*args: Any, **kw: Any) -> Any:
        shutil.rmtree(root)  # the DELETE's erase, between the fork's check and this step
        return step(*args, **kw)
    return raced


def test_a_delete_during_the_plan_is_a_409_not_a_500(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = source(tmp_path)
    load = SnapshotStore.load
    monkeypatch.setattr(SnapshotStore, "load", deleting_first(load, src.root))  # after the transcript is read
    with pytest.raises(RewindRefused) as refused:
        fork.plan(src, SnapshotLimits(), None, dormant=True)
    assert refused.value.status == 409 and "deleted" in refused.value.message


def test_a_delete_during_the_lay_out_is_a_409_and_leaves_no_fork(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    src = source(tmp_path)
    plan = fork.plan(src, SnapshotLimits(), None, dormant=False)
    dst = session_paths(tmp_path, "s_dst")
    monkeypatch.setattr(fork, "restore", deleting_first(fork.restore, src.root))
    with pytest.raises(RewindRefused) as refused:
        fork.lay_out(plan, dst, SnapshotLimits(), {})
    assert refused.value.status == 409 and not dst.root.exists()
