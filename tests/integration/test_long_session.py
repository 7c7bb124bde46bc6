"""One session carries a user's many tasks (docs/architecture.md "Skill contracts"), through the five
services as processes and the scripted model: a deck, an import of an uploaded file, an edit, a
reference question, a compaction, a suspend, a wake and another deck. Each task's workflow loads
without a conflict, each audit passes, each run yields once; after the compaction the context holds
only the live contracts; the UI state's cost records follow the recorded usage and are rebuilt at
the wake."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.runtime_support import Driver
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries, new_session, tool_results
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(420)
USER = {"Authorization": f"Bearer {API_TOKEN}"}
TASKS = [  # (prompt, the workflow its task runs)
    ("Create a presentation about tide pools for a school visit", "deck-generation"),
    ("Import my uploaded PDF uploads/source.pdf as a Gamma deck", "import"),
    ("Change the title of card 2 in my deck", "gml-editing"),
]
REFERENCE = 'eval-policy: {"policy": "gml-cli"}\nHow do I lint a deck?'  # a reference loaded on its own
LAST = ("Create a presentation about coral reefs", "deck-generation")


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return {"GAMMA_IDLE_S": "300"}


@pytest.fixture
def api(module_stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=module_stack.url(), headers=USER, timeout=httpx.Timeout(30, read=30)) as client:
        yield client


def window(items: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The entries from this prompt's user message to the next user message."""
    users = [i for i, e in enumerate(items) if e["type"] == "message" and e["message"]["role"] == "user"]
    at = next(i for i in users if items[i]["message"]["content"] == prompt)
    end = next((i for i in users if i > at), len(items))
    return items[at:end]


def check_task(items: list[dict[str, Any]], prompt: str, workflow: str,
               refs: tuple[str, ...] = ("gml-authoring", "gml-cli")) -> None:
    """`refs`: the references that came with the workflow and end with it."""
    w = window(items, prompt)
    skills = tool_results(w, "skill")
    assert skills and not [r for r in skills if r["isError"]], skills  # loaded without a conflict
    assert workflow in [e["name"] for e in w if e["type"] == "skill_activation"]
    assert [(e["workflow"], e["outcome"]) for e in w if e["type"] == "audit"] == [(workflow, "passed")]
    delivered = [r for r in tool_results(w, "message_user") if (r.get("details") or {}).get("blockOnUser")]
    assert len(delivered) == 1 and not delivered[0]["isError"]  # the run yielded once
    ended = [(e["name"], e["reason"]) for e in w if e["type"] == "skill_end"]
    assert ended == [(workflow, "completed"), *((r, "with_workflow") for r in refs)]


def costs(api: httpx.Client, sid: str) -> list[dict[str, Any]]:
    resp = api.get(f"/sessions/{sid}/ui")
    assert resp.status_code == 200, resp.text
    return list(resp.json()["snapshot"].get("costs") or [])


def requests_in(items: list[dict[str, Any]]) -> int:
    return sum(1 for e in items if e["type"] == "message" and e["message"]["role"] == "assistant")


def test_a_long_session_runs_each_task_under_its_own_contract(api: httpx.Client, module_stack: Stack) -> None:
    sid = new_session(api)
    items = ask(api, sid, TASKS[0][0])
    assert api.put(f"/sessions/{sid}/workspace/files/uploads/source.pdf",
                   content=b"%PDF-1.4\n% a two-page source\n").status_code == 200
    for prompt, _ in TASKS[1:]:
        items = ask(api, sid, prompt)
    for prompt, workflow in TASKS:
        check_task(items, prompt, workflow)
    items = ask(api, sid, REFERENCE)
    assert [e["name"] for e in window(items, REFERENCE) if e["type"] == "skill_activation"] == ["gml-cli"]

    # cost records: the usage of every model request, priced
    records = wait_sync(lambda: (c := costs(api, sid)) and f" {requests_in(entries(api, sid))} model requests" in
                        c[0]["label"] and c, timeout=30, interval=0.2, what="the cost records")
    assert len(records) == 1 and records[0]["amount"] > 0 and records[0]["status"] == "settled"

    # compaction: only the live contract comes back (gml-cli, loaded on its own: the static prefix's "Your
    # task state and active skills survive context compaction"); the ended workflows do not
    assert api.post(f"/sessions/{sid}/compact", json={}).status_code == 200
    items = wait_sync(lambda: (es := entries(api, sid)) and any(e["type"] == "compaction" for e in es) and es,
                      timeout=60, interval=0.2, what="the compaction")
    at = max(i for i, e in enumerate(items) if e["type"] == "compaction")
    restored = [e["details"]["skill"] for e in items[at + 1:]
                if e["type"] == "custom_message" and e["customType"] == "gamma.active_skill"]
    assert restored == ["gml-cli"]
    assert not [e for e in items[at + 1:] if e.get("customType") == "gamma.checklist_progress"]

    # suspend; while dormant a client overwrites the cost records: the wake rebuilds them
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["status"] == "dormant", timeout=30, interval=0.2,
              what="dormant")
    snapshot = api.get(f"/sessions/{sid}/ui").json()["snapshot"]
    forged = [{"id": "model:free", "label": "free", "amount": 0, "status": "settled"}]
    assert api.post(f"/sessions/{sid}/ui/sync", json={"update": "AAA=", "snapshot": {**snapshot, "costs": forged}}
                    ).status_code == 200
    assert costs(api, sid) == forged

    Driver(module_stack.redis_url).wake(sid)  # a wake with no prompt (as an urgent notification's)
    rebuilt = wait_sync(lambda: (c := costs(api, sid)) != forged and c, timeout=30, interval=0.2,
                        what="the cost records rebuilt at the wake")
    assert rebuilt == records

    items = ask(api, sid, LAST[0])  # another deck
    # gml-cli, loaded on its own before this workflow, is not its to end
    check_task(items, *LAST, refs=("gml-authoring",))
    live = [e["name"] for e in items if e["type"] == "skill_activation"]
    assert live.count("gml-cli") == 4 and [e["name"] for e in items if e["type"] == "skill_end"].count("gml-cli") == 3
    assert not [r for r in tool_results(items, "skill") if r["isError"]]  # no refusal in the whole session
    assert [e["workflow"] for e in items if e["type"] == "audit"] == [w for _, w in TASKS] + [LAST[1]]
    final = wait_sync(lambda: (c := costs(api, sid)) and f" {requests_in(entries(api, sid))} model requests" in
                      c[0]["label"] and c, timeout=30, interval=0.2, what="the cost records after the last run")
    assert [r["id"] for r in final] == [records[0]["id"]] and final[0]["amount"] > records[0]["amount"]
