"""The inspector's workflow checklist pane (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools") in headless Chromium against the real stack:
after a deck request ran to completion, the pane shows deck-generation's steps (done, the optional
one skipped), "all N steps reviewed", the completion audit's outcome and the ended contract, all from
the events stream; after a completion with declared deviations, each deviation beside its step.
A screenshot goes to docs/screenshots/checklist.png
(`make screenshots`; a temporary folder otherwise). Skipped without chromium, node or node modules."""

from __future__ import annotations

import json
import subprocess

import httpx

from tests.e2e.test_inspector import CHROMIUM, NODE, ROOT, SHOTS, pytestmark  # noqa: F401 - the same skip
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack


def pane(stack: Stack, prompt: str, shot: str) -> dict[str, object]:
    """What the pane shows once the session's workflow completed."""
    assert NODE is not None and CHROMIUM is not None
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    with httpx.Client(base_url=stack.url(), headers=headers, timeout=30) as api:
        sid = api.post("/sessions", json={}).json()["id"]
        api.post(f"/sessions/{sid}/messages", json={"message": prompt})
        wait_sync(lambda: any(e.get("type") == "skill_end" for e in api.get(f"/sessions/{sid}/transcript").json()["entries"]),
                  timeout=90, interval=0.3, what="the deck run to complete")
    SHOTS.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([NODE, str(ROOT / "tests" / "js" / "checklist.mjs"), stack.url(), API_TOKEN, CHROMIUM,
                          sid, str(SHOTS / shot)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    assert "error" not in out, out["error"]
    assert out["consoleErrors"] == [] and out["ended"] == "true"
    return out


def test_checklist_pane_shows_the_workflow_steps_and_the_audit(module_stack: Stack) -> None:
    out = pane(module_stack, "Create a presentation about lighthouses", "checklist.png")
    assert "No workflow checklist" in str(out["emptyText"])
    assert out["position"] == "all 10 steps reviewed" and out["audit"] == "audit: passed"
    steps = dict(out["steps"])  # type: ignore[call-overload]
    assert steps["validate"] == "done" and steps["lint"] == "done" and steps["research"] == "skipped"
    assert sum(1 for status in steps.values() if status == "done") == 9
    assert out["deviations"] == []


def test_checklist_pane_shows_each_declared_deviation_beside_its_step(module_stack: Stack) -> None:
    prompt = 'eval-policy: {"policy": "deck-generation", "skip": ["inspect", "lint"], "onAudit": "explain"}\nA deck'
    out = pane(module_stack, prompt, "checklist-deviations.png")
    assert out["audit"] == "audit: deviations reported"
    cause = "deviation: skipped on purpose in this evaluation run"
    assert out["deviations"] == [["inspect", cause], ["lint", cause]]
