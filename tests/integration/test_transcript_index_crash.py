"""kill -9 at any point of an append, a compaction or a leaf move leaves a transcript index that is
either correct or found stale and rebuilt (shared/history/transcript_index.py "Crash rules"): the next wake
restores what the full read of the file restores (tests/support/history_reference.py)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripted.history import write_history
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.history import transcript_index as ix
from tests.support.history_reference import assert_same, reference

REPO = Path(__file__).resolve().parents[2]


def _crashed(tmp_path: Path, where: str, seed: int) -> Path:
    path = write_history(tmp_path / "transcript.jsonl", 1_500_000, compaction_every=50_000, branch_every=80_000,
                         payload=700, seed=seed).path
    ix.rebuild(path)  # the index as a previous wake left it
    child = subprocess.Popen([sys.executable, "-m", "tests.integration.index_crash_child", str(path), where, str(seed)],
                             cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    if where == "anywhere":
        time.sleep(random.Random(seed).uniform(0.05, 1.5))
        child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=120) == -signal.SIGKILL
    return path


def _check(path: Path) -> None:
    ref = reference(path)
    index = ix.read_index(path)
    if index is not None:  # kept: it must describe the file as it is (its window and facts are checked below)
        assert index.length <= path.stat().st_size
    loaded = ix.load(path)
    assert_same(Transcript.of(path, WriteGuard(), loaded), ref)
    assert_same(Transcript.load(path, WriteGuard()), ref)  # and again, from what that wake left


@pytest.mark.parametrize("where", ["torn_append", "before_index", "index_temp", "before_reload"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_kill_at_a_chosen_point_leaves_a_correct_or_rebuilt_index(tmp_path: Path, where: str, seed: int) -> None:
    _check(_crashed(tmp_path, where, seed))


@pytest.mark.parametrize("seed", range(6))
def test_a_kill_at_any_time_leaves_a_correct_or_rebuilt_index(tmp_path: Path, seed: int) -> None:
    _check(_crashed(tmp_path, "anywhere", 10 + seed))
