"""`make eval`'s entry point (bench/eval.py) over every scenario of evals/*.yaml, through its own stack
of the five services (scripted model): CI runs the evaluations through this test, which fails when any
scenario does not show what it expects (a skipped step the audit or the checks must catch, or a clean
policy that fails a check)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import eval as make_eval
from bench.eval_checks import load_scenarios
from services.runtime.skillset.skills import load_skills

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


def test_make_eval_passes_every_scenario_over_the_scripted_model(redis_url: str, tmp_path: Path) -> None:
    scenarios = {s.name for s in load_scenarios(ROOT / "evals", load_skills(ROOT / "skills"))}
    out = tmp_path / "eval.json"
    code = make_eval.main(["--runs", "1", "--json", str(out), "--redis-url", redis_url, "--concurrency", "4"])
    report = json.loads(out.read_text())
    failed = {name: [r.get("error") or {k: v for k, v in r.items() if k in ("checks", "audits")} for r in s["runs"]]
              for name, s in report["scenarios"].items() if not all(r["as_expected"] for r in s["runs"])}
    assert failed == {} and code == 0, failed
    assert set(report["scenarios"]) == scenarios and report["summary"]["runs"] == len(scenarios)

    skipped = report["scenarios"]["deck-skip-validate-repair"]["runs"][0]
    assert skipped["audits"] == ["blocked", "passed"]  # the audit refused, the policy repaired
    assert skipped["checks"]["steps_in_order"] is False  # the evaluation still sees validate done late
    assert skipped["checks"]["skills_first_batch"] and skipped["checks"]["yield"]
    explained = report["scenarios"]["deck-skip-inspect-explain"]["runs"][0]
    assert explained["audits"] == ["blocked", "deviations_reported"]  # declared in message_user's deviations
    clean = report["scenarios"]["ref-gml-cli"]["runs"][0]
    assert all(clean["checks"].values()) and clean["first_batch_skills"] == ["gml-cli"]
    question = report["scenarios"]["ask-audience"]["runs"][0]
    assert question["audits"] == [] and question["checks"]["yield"]
