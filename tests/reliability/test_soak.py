"""The 3-minute soak (bench/soak.py; 20 minutes nightly: `make soak`): 50 sessions of mixed traffic
(prompts, notifications, file saves, deck edits, uploads, compactions, suspend and wake).

Flat after the warm-up (here minute 1: a quarter of the run, at least a minute, bench/soak_report.py):
the RSS and open fds of every service and Redis' memory at most 5% above their value after it; the
session disk growing by no more per acknowledged write at the end than after the warm-up (x1.5 at
most); p99 prompt -> answer of the last minute at most 1.5x the first minute's; and the exactly-once
audit clean, no request failed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.soak import run
from bench.soak_report import render, verdict

pytestmark = [
    pytest.mark.slow, pytest.mark.timeout(480),
    # Opt-in (`GAMMA_SOAK=1`, or `make soak`): on the shared 2-core machine the load's rate is set by
    # the other runs, and RSS (a high-water mark) and Redis' memory follow the rate, not the time
    # (bench/results/soak.20m.md: the runtime 236 -> 277 MB while the writes per minute rose from
    # ~1,100 to ~2,800, then flat for 6 minutes); not yet run reliably three times in a row.
    pytest.mark.skipif(os.environ.get("GAMMA_SOAK") != "1",
                       reason="the load's rate follows the shared machine, and RSS with it (bench/results/soak.20m.md); GAMMA_SOAK=1 runs it"),
]

MINUTES = 3
SESSIONS = 50
ROUNDS = 4  # per session before it retires: a generation turns over well within the 1-minute warm-up


def test_soak(tmp_path: Path) -> None:
    result = run(MINUTES, SESSIONS, sample_s=10.0, rounds=ROUNDS, work_dir=tmp_path)
    outcome = verdict(result)
    print("\n" + render(result, tmp_path / "soak.png"))
    print("SOAK VERDICT " + json.dumps(outcome, indent=2))
    assert result["audit"]["prompts_checked"] > SESSIONS
    assert len(result["samples"]) >= MINUTES * 6 - 1
    assert outcome["failed"] == [], outcome
