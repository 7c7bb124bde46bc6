"""The agent's tabs follow the seed's tab rules on the real stack (five processes, real Redis, the
scripted model): a tab is identified by its base resource (`gamma:file:d1`), its view state and
location stay part of the reference (`#card_3`), and each pane owns its active tab. The user has the
deck open at a card in the right pane; the agent shows the deck at another card: the same tab moves
there and becomes the right pane's active tab, with no duplicate and the left pane untouched."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from shared.ui.uidoc import EMPTY_UPDATE
from tests.integration.test_stale_deck_write import DECK, call, yielded
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
USER = {"authorization": f"Bearer {API_TOKEN}"}
PANES = {"panes": [{"id": "left", "tabIds": ["t1"]}, {"id": "right", "tabIds": ["t2"]}],
         "tabs": {"t1": {"id": "t1", "ari": "file:notes.md", "title": "notes"},
                  "t2": {"id": "t2", "ari": "gamma:file:d1#card_1", "title": "Q3"}},
         "activeTabByPane": {"left": "t1", "right": "t2"}}


@pytest.fixture(scope="module")
def http(module_stack: Stack) -> Any:
    with httpx.Client(base_url=module_stack.url(), headers=USER, timeout=30) as client:
        yield client


def ui(http: httpx.Client, sid: str) -> dict[str, Any]:
    r = http.get(f"/sessions/{sid}/ui")
    assert r.status_code == 200, r.text
    return dict(r.json()["snapshot"])


def test_the_agent_opening_a_deck_at_a_card_reuses_the_users_tab_in_its_pane(http: httpx.Client) -> None:
    sid = str(http.post("/sessions", json={}).json()["id"])
    assert http.put(f"/sessions/{sid}/documents/d1", json=DECK).status_code == 200
    snapshot = {**ui(http, sid), **PANES}
    r = http.post(f"/sessions/{sid}/ui/sync", json={"update": base64.b64encode(EMPTY_UPDATE).decode(),
                                                     "snapshot": snapshot})
    assert r.status_code == 200, r.text
    steps = [call("show_gamma", doc="d1", card="card_3"), call("show_gamma", doc="d1"),
             call("message_user", message="Here is card 3.", blockOnUser=True)]
    assert http.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(steps)}).status_code == 202
    wait_sync(lambda: yielded(http, sid), timeout=90, what="the agent's yield")
    state = ui(http, sid)
    assert sorted(state["tabs"]) == ["t1", "t2"], "no duplicate tab for the same deck"
    assert state["tabs"]["t2"]["ari"] == "gamma:file:d1#card_3", "the location moved; the bare resource kept it"
    assert state["panes"] == PANES["panes"]
    assert state["activeTabByPane"] == {"left": "t1", "right": "t2"}, "only the deck's own pane changed"
