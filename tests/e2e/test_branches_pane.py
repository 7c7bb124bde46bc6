"""The inspector's branch points in headless Chromium against the real stack: a session rewound to its
first reply and then sent another message shows one branch point with both branches; "switch" rewinds
to the other branch's leaf, and the page shows that branch and its files. A screenshot goes to
docs/screenshots/branches.png
(`make screenshots`; a temporary folder otherwise). Skipped without chromium, node or node modules."""

from __future__ import annotations

import json
import subprocess

import httpx

from tests.e2e.test_inspector import CHROMIUM, NODE, ROOT, SHOTS, pytestmark  # noqa: F401 - the same skip
from tests.integration.test_rewind_fork import bash, file, script, send, user_entry
from tests.support.stack import API_TOKEN, Stack


def test_the_inspector_shows_a_branch_point_and_switches_branches(module_stack: Stack) -> None:
    assert NODE is not None and CHROMIUM is not None
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    with httpx.Client(base_url=module_stack.url(), headers=headers, timeout=30) as api:
        sid = str(api.post("/sessions", json={}).json()["id"])
        send(api, sid, script(bash("printf one > f.txt"), mark="first"))
        send(api, sid, script(bash("printf two > f.txt"), mark="second"))
        second = user_entry(api, sid, "second")
        assert api.post(f"/sessions/{sid}/rewind", json={"entry_id": second["parentId"]}).status_code == 200
        send(api, sid, script(bash("printf three > f.txt"), mark="third"))
        assert file(api, sid, "f.txt") == "three"
        SHOTS.mkdir(parents=True, exist_ok=True)
        run = subprocess.run([NODE, str(ROOT / "tests" / "js" / "branches.mjs"), module_stack.url(), API_TOKEN,
                              CHROMIUM, sid, str(SHOTS / "branches.png")], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        out = json.loads(run.stdout.strip().splitlines()[-1])
        assert "error" not in out, out["error"]
        assert [active for _, active in out["before"]] == [False, True]
        assert "second" in out["before"][0][0] and "third" in out["before"][1][0]
        assert out["rewoundNotes"] == 1
        assert not any("second" in t for t in out["userTextsBefore"])
        assert [active for _, active in out["after"]] == [True, False], "switched to the other branch"
        assert any("second" in t for t in out["userTextsAfter"]) and not any("third" in t for t in out["userTextsAfter"])
        assert file(api, sid, "f.txt") == "two", "the other branch's files"
        assert out["consoleErrors"] == []
