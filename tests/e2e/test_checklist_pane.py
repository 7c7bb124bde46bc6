"""The inspector's workflow checklist pane (issue 21) in headless Chromium against the real stack:
after a deck request ran to completion, the pane shows deck-generation's steps (done, the optional
one skipped), "all N steps reviewed" and the completion audit's outcome, all from the events stream.
A screenshot goes to docs/screenshots/checklist.png. Skipped without chromium, node or node modules."""

from __future__ import annotations

import json
import subprocess
import time

import httpx

from tests.e2e.test_inspector import CHROMIUM, NODE, ROOT, SHOTS, pytestmark  # noqa: F401 - the same skip
from tests.support.stack import API_TOKEN, Stack


def test_checklist_pane_shows_the_workflow_steps_and_the_audit(module_stack: Stack) -> None:
    assert NODE is not None and CHROMIUM is not None
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    with httpx.Client(base_url=module_stack.url(), headers=headers, timeout=30) as api:
        sid = api.post("/sessions", json={}).json()["id"]
        api.post(f"/sessions/{sid}/messages", json={"message": "Create a presentation about lighthouses"})
        deadline = time.monotonic() + 90
        while not any(e.get("type") == "audit" for e in api.get(f"/sessions/{sid}/transcript").json()["entries"]):
            assert time.monotonic() < deadline, "the deck run never completed"
            time.sleep(0.3)
    SHOTS.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([NODE, str(ROOT / "tests" / "js" / "checklist.mjs"), module_stack.url(), API_TOKEN, CHROMIUM,
                          sid, str(SHOTS / "checklist.png")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert "error" not in out, out["error"]
    assert "No workflow checklist" in out["emptyText"]
    assert out["position"] == "all 10 steps reviewed" and out["audit"] == "audit: passed"
    steps = dict(out["steps"])
    assert steps["validate"] == "done" and steps["lint"] == "done" and steps["research"] == "skipped"
    assert sum(1 for status in steps.values() if status == "done") == 9
    assert out["consoleErrors"] == []
