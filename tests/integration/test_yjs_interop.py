"""A real `yjs` client (Node) against /ui/sync and GET /ui, dormant and live, in both directions:
yjs -> proxy/runtime (incremental V1 updates built by yjs) and pycrdt -> yjs (updates the Python side
made, decoded by yjs from GET /ui). Skipped only when node or node_modules/yjs is absent."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from pycrdt import Doc, Map

from shared.ui.uidoc import ROOT
from tests.support.needs import needs
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

ROOT_DIR = Path(__file__).resolve().parents[2]
SCRIPT = ROOT_DIR / "tests" / "js" / "ui_client.mjs"
NODE = shutil.which("node")
pytestmark = needs(None if NODE and (ROOT_DIR / "node_modules" / "yjs").is_dir()
                   else "needs node and `npm install` (node_modules/yjs)")
ALICE = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture(scope="module")
def stack(module_stack: Stack) -> Stack:
    return module_stack


def node(stack: Stack, mode: str, sid: str, *extra: str) -> dict[str, Any]:
    assert NODE is not None
    done = subprocess.run([NODE, str(SCRIPT), mode, stack.url(), API_TOKEN, sid, *extra], cwd=ROOT_DIR,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def check_edit(result: dict[str, Any]) -> None:
    assert result["seedMatches"], result
    assert result["syncStatus"] == 200, result
    for snapshot in (result["syncSnapshot"], result["refetched"]):
        assert snapshot["tabs"]["tjs"] == {"id": "tjs", "ari": "gamma:file:d1?mode=edit#card_2", "title": "Opened from yjs"}
        assert {"id": "pjs", "tabIds": ["tjs"]} in snapshot["panes"]
        assert snapshot["activeTabByPane"]["pjs"] == "tjs"
        assert snapshot["expandedDirs"][-1] == "from-js/" and snapshot["mobile"]["view"] == "files"
    assert result["syncDocMatches"] and result["mergedMatches"], result


def python_edit(api: httpx.Client, sid: str) -> None:
    """pycrdt -> yjs: seed from GET /ui, change a nested map, send only the incremental update."""
    doc: Doc = Doc()
    doc.get(ROOT, type=Map)
    doc.apply_update(base64.b64decode(api.get(f"/sessions/{sid}/ui").json()["update"]))
    before = doc.get_state()
    root = doc.get(ROOT, type=Map)
    root["recentResources"].append("file:from-python.md")
    root["tabs"]["tjs"]["title"] = "Renamed by pycrdt"
    resp = api.post(f"/sessions/{sid}/ui/sync", json={"update": base64.b64encode(doc.get_update(before)).decode()})
    assert resp.status_code == 200, resp.text


def check_python_edit(stack: Stack, sid: str) -> None:
    seen = node(stack, "read", sid)
    assert seen["status"] == 200 and seen["matches"]
    assert seen["state"]["recentResources"][-1] == "file:from-python.md"
    assert seen["state"]["tabs"]["tjs"]["title"] == "Renamed by pycrdt"


def test_dormant(api: httpx.Client, stack: Stack) -> None:
    sid = str(api.post("/sessions").json()["id"])
    check_edit(node(stack, "edit", sid))
    python_edit(api, sid)
    check_python_edit(stack, sid)
    state = json.loads((stack.data_dir / "sessions" / sid / "state.json").read_text())
    assert state["tabs"]["tjs"]["title"] == "Renamed by pycrdt"
    garbage = node(stack, "garbage", sid)
    assert garbage["yjsRejects"] and garbage["status"] == 400 and "Yjs" in garbage["error"]
    assert json.loads((stack.data_dir / "sessions" / sid / "state.json").read_text()) == state
    assert api.get(f"/sessions/{sid}").json()["status"] == "dormant"


def test_dormant_update_without_snapshot(api: httpx.Client, stack: Stack) -> None:
    """The proxy rebuilds the document from state.json deterministically, so a yjs client seeded from
    GET /ui can send just its incremental update while the session is dormant."""
    sid = str(api.post("/sessions").json()["id"])
    check_edit(node(stack, "edit", sid, "--no-snapshot"))


def test_live(api: httpx.Client, stack: Stack) -> None:
    sid = str(api.post("/sessions").json()["id"])
    assert api.post(f"/sessions/{sid}/messages", json={"message": "wake up"}).status_code == 202
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["status"] == "live", timeout=60, interval=0.25, what="live")
    check_edit(node(stack, "edit", sid))
    python_edit(api, sid)
    check_python_edit(stack, sid)
    garbage = node(stack, "garbage", sid)
    assert garbage["yjsRejects"] and garbage["status"] == 400
    assert api.get(f"/sessions/{sid}").json()["status"] == "live"


def test_live_follower_applies_incremental_events(api: httpx.Client, stack: Stack) -> None:
    """`ui_update` events carry the change only (docs/architecture.md "Limits on hostile input"): a yjs client that subscribed and
    seeded from GET /ui applies them and ends equal to the server's state."""
    sid = str(api.post("/sessions").json()["id"])
    assert api.post(f"/sessions/{sid}/messages", json={"message": "wake up"}).status_code == 202
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["status"] == "live", timeout=60, interval=0.25, what="live")
    got = node(stack, "follow", sid)
    assert got["statuses"] == [200] * 5, got
    assert got["events"] >= 5 and got["eventKeys"] == ["update"], got
    assert got["followerMatches"], got
    assert got["state"]["expandedDirs"] == [f"follow-{i}/" for i in range(5)]
