"""Invalid UI state is refused (docs/architecture.md "Limits on hostile input"): accepted live (200,
written to state.json), it would make every dormant /ui/sync, even an empty update, answer 422 and
GET /ui serve the invalid state.

One rule (shared.ui.uirules) judges the merged document live (runtime) and dormant (proxy) before
anything is applied: a refused update answers 422 with the reason and changes nothing, and an invalid
state.json on disk is repaired on read. Real services, pycrdt clients."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
from pycrdt import Map

from shared.ui.uidoc import EMPTY_UPDATE
from tests.hostile.ui_support import edit, new_session, seeded, state_path, stored, suspend, sync, wake
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
ALICE = {"Authorization": f"Bearer {API_TOKEN}"}


def _unknown_key(root: Map) -> None:
    root["cursor"] = 3


def _evil_tab(root: Map) -> None:
    root["tabs"]["tx"] = Map({"id": "tx", "ari": "javascript:alert(1)"})


def _bad_version(root: Map) -> None:
    root["schemaVersion"] = "x"


def _evil_view(root: Map) -> None:
    root["mobile"]["view"] = "evil"


# (the change a client makes, words the 422 must name)
BAD: list[tuple[Callable[[Map], None], tuple[str, ...]]] = [
    (_unknown_key, ("cursor",)),
    (_evil_tab, ("tabs.tx.ari", "scheme")),
    (_bad_version, ("schemaVersion",)),
    (_evil_view, ("mobile.view",)),
]


def _good(root: Map) -> None:
    root["tabs"]["tg"] = Map({"id": "tg", "ari": "file:notes.md", "title": "notes"})
    root["mobile"]["view"] = "files"


@pytest.fixture(scope="module")
def stack(module_stack: Stack) -> Stack:
    return module_stack


def refuse_every_bad_change(api: httpx.Client, stack: Stack, sid: str) -> None:
    for change, words in BAD:
        ui_before, disk_before = api.get(f"/sessions/{sid}/ui").json()["snapshot"], stored(stack, sid)
        resp = sync(api, sid, edit(seeded(api, sid), change))
        assert resp.status_code == 422, (change.__name__, resp.text)
        assert all(w in resp.json()["error"] for w in words), (change.__name__, resp.json())
        assert stored(stack, sid) == disk_before, f"{change.__name__}: a refused update changed state.json"
        assert api.get(f"/sessions/{sid}/ui").json()["snapshot"] == ui_before, change.__name__


def refuse_bad_snapshots(api: httpx.Client, stack: Stack, sid: str) -> None:
    """Snapshot-only syncs (clients without Yjs) pass the same rule."""
    current = api.get(f"/sessions/{sid}/ui").json()["snapshot"]
    deep: list[object] = []
    for _ in range(40):
        deep = [deep]
    for name, snapshot, words in [
        ("ari", {**current, "tabs": {"tx": {"id": "tx", "ari": "javascript:x"}}}, "tabs.tx.ari"),
        ("surrogate", {**current, "expandedDirs": ["\ud800"]}, "not valid Unicode"),  # pycrdt panicked on it
        ("depth", {**current, "researchSources": [{"x": deep}]}, "nested"),
        ("unknown", {**current, "cursor": 1}, "cursor"),
    ]:
        disk_before = stored(stack, sid)
        resp = sync(api, sid, EMPTY_UPDATE, snapshot)
        assert resp.status_code == 422 and words in resp.json()["error"], (name, resp.text[:300])
        assert stored(stack, sid) == disk_before and api.get(f"/sessions/{sid}/ui").json()["snapshot"] == current


def test_invalid_ui_state_is_refused_live_and_dormant_and_changes_nothing(api: httpx.Client, stack: Stack) -> None:
    sid = new_session(api)
    wake(api, sid)
    refuse_every_bad_change(api, stack, sid)
    refuse_bad_snapshots(api, stack, sid)
    good = sync(api, sid, edit(seeded(api, sid), _good))
    assert good.status_code == 200, good.text
    assert good.json()["snapshot"]["tabs"]["tg"]["ari"] == "file:notes.md"

    suspend(api, sid)
    # Not a 422 here, for every dormant sync, as stored invalid state would cause.
    empty = sync(api, sid, EMPTY_UPDATE)
    assert empty.status_code == 200, empty.text
    assert empty.json()["snapshot"]["tabs"]["tg"]["title"] == "notes"
    assert empty.json()["snapshot"]["mobile"]["view"] == "files"
    refuse_every_bad_change(api, stack, sid)
    refuse_bad_snapshots(api, stack, sid)
    again = sync(api, sid, edit(seeded(api, sid), lambda root: root["expandedDirs"].append("src/")))
    assert again.status_code == 200 and again.json()["snapshot"]["expandedDirs"] == ["src/"]
    assert stored(stack, sid)["expandedDirs"] == ["src/"]


def test_state_json_written_before_the_rule_is_repaired_on_read(api: httpx.Client, stack: Stack) -> None:
    """A state.json without the rule's checks: read back valid (bad parts dropped), live and dormant alike."""
    sid = new_session(api)
    path = state_path(stack, sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    poisoned = json.dumps({
        "panes": [{"id": "main", "tabIds": ["ok", "bad"]}],
        "tabs": {"ok": {"id": "ok", "ari": "file:a.md"}, "bad": {"id": "bad", "ari": "javascript:alert(1)"}},
        "mobile": {"view": "evil"}, "cursor": 3, "schemaVersion": 1, "expandedDirs": ["x/"],
    })
    path.write_text(poisoned)
    dormant = api.get(f"/sessions/{sid}/ui").json()["snapshot"]
    assert set(dormant["tabs"]) == {"ok"} and "cursor" not in dormant
    assert dormant["mobile"] == {"view": "chat", "filePaneOpen": False} and dormant["expandedDirs"] == ["x/"]
    assert sync(api, sid, EMPTY_UPDATE).status_code == 200
    assert sync(api, sid, edit(seeded(api, sid), _good)).status_code == 200
    assert set(stored(stack, sid)["tabs"]) == {"ok", "tg"}

    path.write_text(poisoned)  # and the runtime, waking on such a file, repairs it the same way
    wake(api, sid)
    live = api.get(f"/sessions/{sid}/ui").json()["snapshot"]
    assert live.pop("costs") and dormant.pop("costs") == []  # the wake's prompt recorded its cost
    assert live == dormant
    good = sync(api, sid, edit(seeded(api, sid), _good))
    assert good.status_code == 200, good.text
    assert set(stored(stack, sid)["tabs"]) == {"ok", "tg"} and stored(stack, sid)["mobile"]["view"] == "files"


def test_a_client_made_form_is_refused_live_and_dormant_alike(api: httpx.Client) -> None:
    """Before: an update that changed something plus a snapshot holding a form the client made was a
    200 live (the snapshot was not looked at) and a 403 dormant: the two paths disagreed."""
    forged = {"id": "f9", "title": "Forged", "status": "submitted", "answers": {"ok": "yes"},
              "fields": [{"id": "ok", "label": "Approve?", "kind": "text", "required": True}]}
    sid = new_session(api)
    wake(api, sid)
    answers: dict[str, int] = {}
    for mode in ("live", "dormant"):
        if mode == "dormant":
            suspend(api, sid)
        doc = seeded(api, sid)
        update = edit(doc, lambda root, d=f"{mode}/": root["expandedDirs"].append(d))
        snapshot = {**api.get(f"/sessions/{sid}/ui").json()["snapshot"], "activeForm": forged}
        resp = sync(api, sid, update, snapshot)
        answers[mode] = resp.status_code
        assert api.get(f"/sessions/{sid}/ui").json()["snapshot"].get("activeForm") is None, mode
    assert answers == {"live": 403, "dormant": 403}
