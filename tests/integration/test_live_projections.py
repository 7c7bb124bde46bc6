"""Server-owned projections follow their sources live, on the real stack (five processes, real Redis,
the scripted model; docs/architecture.md "Viewable files and cost records"):

- the viewable files: every change (the agent's write, a command's files, a user's upload or delete)
  reaches the clients as a `viewable_files` event, not only in the wake's `status` event;
- the cost records: updated after a model reply while the run is still going, and after a compaction
  they still count every request before it (the transcript, not the model's context, is their source).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.integration.runtime_support import Driver
from tests.support.polling import wait_sync
from tests.support.sessions import entries, new_session
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
USER = {"authorization": f"Bearer {API_TOKEN}"}
WAIT_FOR_FLAG = "for i in $(seq 1 1200); do [ -f go.flag ] && exit 0; sleep 0.05; done; echo no flag; exit 1"


def step(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


@pytest.fixture(scope="module")
def http(module_stack: Stack) -> Any:
    with httpx.Client(base_url=module_stack.url(), headers=USER, timeout=30) as client:
        yield client


def viewable(d: Driver, sid: str) -> list[dict[str, Any]]:
    return [e["data"] for e in d.events(sid) if e["type"] == "viewable_files"]


def costs(http: httpx.Client, sid: str) -> list[dict[str, Any]]:
    return list(http.get(f"/sessions/{sid}/ui").json()["snapshot"].get("costs") or [])


def replies(http: httpx.Client, sid: str) -> int:
    return sum(1 for e in entries(http, sid) if e["type"] == "message" and e["message"]["role"] == "assistant")


def test_viewable_files_and_costs_follow_their_sources_live(http: httpx.Client, module_stack: Stack) -> None:
    d = Driver(module_stack.redis_url)
    sid = new_session(http)
    steps = [step("write", path="brief.xml", content="<brief/>"),
             step("bash", command="mkdir -p out && for i in 1 2 3; do echo $i > out/card_$i.txt; done"),
             step("bash", command=WAIT_FOR_FLAG), step("message_user", message="done", blockOnUser=True)]
    assert http.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(steps)}).status_code == 202

    # while the run waits in its command: the agent's files are announced, the costs already count
    added = wait_sync(lambda: (got := sorted(p for ev in viewable(d, sid) for p in ev["added"])) and
                      "out/card_3.txt" in got and got, timeout=60, what="the agent's files announced")
    assert added == ["brief.xml", "out/card_1.txt", "out/card_2.txt", "out/card_3.txt"]
    assert len([ev for ev in viewable(d, sid) if "out/card_1.txt" in ev["added"]]) == 1  # one event per command
    assert http.get(f"/sessions/{sid}").json()["running"]
    live = wait_sync(lambda: (c := costs(http, sid)) and c, timeout=30, what="cost records during the run")
    assert " model requests" in live[0]["label"]

    # a user's upload and delete, announced too
    assert http.put(f"/sessions/{sid}/workspace/files/uploads/logo.txt", content=b"logo").status_code == 200
    wait_sync(lambda: any("uploads/logo.txt" in ev["added"] for ev in viewable(d, sid)), timeout=30, what="the upload")
    assert http.delete(f"/sessions/{sid}/workspace/files/out/card_2.txt").status_code == 200
    last = wait_sync(lambda: next((ev for ev in viewable(d, sid) if "out/card_2.txt" in ev["removed"]), None),
                     timeout=30, what="the delete")
    assert last["count"] == 4  # brief, two cards, the logo (go.flag comes next)
    assert http.put(f"/sessions/{sid}/workspace/files/go.flag", content=b"1").status_code == 200
    wait_sync(lambda: not http.get(f"/sessions/{sid}").json()["running"], timeout=60, what="the run's end")

    # compaction: the records still count every reply (their source is the transcript)
    before = wait_sync(lambda: (c := costs(http, sid)) and f" {replies(http, sid)} model requests" in c[0]["label"]
                       and c, timeout=30, what="the records after the run")
    assert http.post(f"/sessions/{sid}/compact", json={}).status_code == 200
    wait_sync(lambda: any(e["type"] == "compaction" for e in entries(http, sid)), timeout=60, what="the compaction")
    assert http.post(f"/sessions/{sid}/messages", json={"message": "hello after the compaction"}).status_code == 202
    after = wait_sync(lambda: (c := costs(http, sid)) and f" {replies(http, sid)} model requests" in c[0]["label"]
                      and c[0] != before[0] and c, timeout=60, what="the records after the next reply")
    assert after[0]["amount"] >= before[0]["amount"]
