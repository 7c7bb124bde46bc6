"""No silent overwrite of a user's deck edit (docs/architecture.md "Delivery, yield and the idle
rules"), on the real stack: five processes, real Redis, the scripted model.

The agent reads a deck (`show_gamma` with only `doc`), then waits in bash for a flag file; the test
PATCHes the deck through the proxy with `If-Match` (the user's edit lands between the agent's read
and its write), then writes the flag. The agent's write is refused with an error telling it to read
again, the user's edit is still stored, and after a new read the same write goes through.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
USER = {"authorization": f"Bearer {API_TOKEN}"}
DECK = {"title": "Q3 review", "theme": "dark", "metadata": {}, "assets": [],
        "cards": [{"id": f"card_{i}", "title": f"Title {i}", "body": f"Body {i}"} for i in range(1, 4)]}
AGENT_DECK = {**DECK, "cards": [{**c, "body": f"{c['body']} (tightened)"} for c in DECK["cards"]]}
WAIT_FOR_FLAG = "for i in $(seq 1 1200); do [ -f go.flag ] && exit 0; sleep 0.05; done; echo no flag; exit 1"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def results(http: httpx.Client, sid: str, tool: str) -> list[dict[str, Any]]:
    r = http.get(f"/sessions/{sid}/transcript")
    assert r.status_code == 200, r.text
    return [e["message"] for e in r.json()["entries"] if e.get("type") == "message"
            and e["message"].get("role") == "toolResult" and e["message"].get("toolName") == tool]


def yielded(http: httpx.Client, sid: str) -> bool:
    return any((m.get("details") or {}).get("blockOnUser") for m in results(http, sid, "message_user"))


@pytest.fixture(scope="module")
def http(module_stack: Stack) -> Any:
    with httpx.Client(base_url=module_stack.url(), headers=USER, timeout=30) as client:
        yield client


def test_a_patch_between_the_agents_read_and_its_write_refuses_the_write(http: httpx.Client) -> None:
    r = http.post("/sessions", json={})
    assert r.status_code == 201, r.text
    sid = str(r.json()["id"])
    r = http.put(f"/sessions/{sid}/documents/d1", json=DECK)
    assert r.status_code == 200 and r.json()["revision"] == 1, r.text
    steps = [call("show_gamma", doc="d1"), call("bash", command=WAIT_FOR_FLAG),
             call("show_gamma", doc="d1", deck=AGENT_DECK),  # stale: the user's PATCH came in between
             call("show_gamma", doc="d1"), call("show_gamma", doc="d1", deck=AGENT_DECK),
             call("message_user", message="Tightened every body.", blockOnUser=True)]
    r = http.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(steps)})
    assert r.status_code == 202, r.text
    wait_sync(lambda: results(http, sid, "show_gamma"), timeout=60, what="the agent's read")

    patched = http.patch(f"/sessions/{sid}/documents/d1", headers={"if-match": "1"},
                         json={"cards": [{"id": "card_2", "title": "Edited by the user"}]})
    assert patched.status_code == 200 and patched.json()["revision"] == 2, patched.text
    assert http.put(f"/sessions/{sid}/workspace/files/go.flag", content=b"go").status_code == 200
    wait_sync(lambda: yielded(http, sid), timeout=60, what="the run's end")

    read, refused, reread, written = results(http, sid, "show_gamma")
    assert not read["isError"] and read["details"]["revision"] == 1
    text = refused["content"][0]["text"]
    assert refused["isError"] and refused["details"] == {"ari": "gamma:file:d1", "stale": True, "revision": 2}
    assert "revision 2" in text and "last revision you read is 1" in text and "show_gamma with only doc='d1'" in text
    # Refused means untouched: the re-read finds the user's edit, and the write after it is revision 3.
    assert not reread["isError"] and reread["details"]["revision"] == 2
    assert "Edited by the user" in reread["content"][0]["text"]
    assert not written["isError"] and written["details"]["revision"] == 3
    stored = http.get(f"/sessions/{sid}/documents/d1").json()
    assert stored["revision"] == 3 and stored["cards"][1]["body"] == "Body 2 (tightened)"


def test_the_agents_own_write_counts_as_read_and_an_unread_deck_is_refused(http: httpx.Client) -> None:
    r = http.post("/sessions", json={})
    sid = str(r.json()["id"])
    assert http.put(f"/sessions/{sid}/documents/mine", json=DECK).status_code == 200  # the user's, never read
    steps = [call("show_gamma", doc="new", deck=DECK), call("show_gamma", doc="new", deck=AGENT_DECK),
             call("show_gamma", doc="mine", deck=AGENT_DECK),
             call("message_user", message="Done.", blockOnUser=True)]
    r = http.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(steps)})
    assert r.status_code == 202, r.text
    wait_sync(lambda: yielded(http, sid), timeout=60, what="the run's end")
    created, replaced, unread = results(http, sid, "show_gamma")
    assert [created["details"]["revision"], replaced["details"]["revision"]] == [1, 2]
    assert not created["isError"] and not replaced["isError"]
    assert unread["isError"] and "you have not read it in this session" in unread["content"][0]["text"]
    assert http.get(f"/sessions/{sid}/documents/mine").json()["revision"] == 1
