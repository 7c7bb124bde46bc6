"""`make eval`'s entry point (bench/eval.py) on a subset, through its own stack of the five services
(scripted model): a clean reference lookup, a question that is not a completion, and a policy that
skips a step, which the completion audit and the evaluation's checks must both catch."""

from __future__ import annotations

import json
from pathlib import Path

from bench import eval as make_eval

SUBSET = ("deck-skip-validate-repair", "ask-audience", "ref-gml-cli")


def test_make_eval_runs_scenarios_and_catches_the_skipped_step(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "eval.json"
    code = make_eval.main(["--only", ",".join(SUBSET), "--runs", "1", "--json", str(out), "--redis-url", redis_url])
    report = json.loads(out.read_text())
    assert code == 0, report["summary"]
    assert set(report["scenarios"]) == set(SUBSET) and report["summary"]["runs"] == 3
    skipped = report["scenarios"]["deck-skip-validate-repair"]["runs"][0]
    assert skipped["audits"] == ["blocked", "passed"]  # the audit refused, the policy repaired
    assert skipped["checks"]["steps_in_order"] is False  # the evaluation still sees validate done late
    assert skipped["checks"]["skills_first_batch"] and skipped["checks"]["yield"]
    clean = report["scenarios"]["ref-gml-cli"]["runs"][0]
    assert all(clean["checks"].values()) and clean["first_batch_skills"] == ["gml-cli"]
    question = report["scenarios"]["ask-audience"]["runs"][0]
    assert question["audits"] == [] and question["checks"]["yield"]
