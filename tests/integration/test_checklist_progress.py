"""Checklist progress (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools") through all five services: `checklist` events tell a client which
step of the active workflow the agent is on, and come again after a compaction and after a wake while
the workflow's contract is live (an audited completion ends it: docs/architecture.md "Skill contracts")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.redis import keys
from tests.integration.runtime_support import Driver, transcript
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture
def api(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.url(), headers=ALICE, timeout=httpx.Timeout(30, read=30)) as client:
        yield client


def wait(pred: Any, what: str, timeout: float = 90) -> Any:
    return wait_sync(pred, timeout=timeout, interval=0.2, what=what)


def checklists(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "checklist"]


def statuses(data: dict[str, Any]) -> dict[str, str]:
    return {s["id"]: s["status"] for s in data["steps"]}


def test_progress_events_follow_the_steps_and_come_back_after_compaction_and_wake(
        stack: Stack, api: httpx.Client) -> None:
    d = Driver(stack.redis_url)
    sid = api.post("/sessions", json={}).json()["id"]
    api.post(f"/sessions/{sid}/messages", json={"message": "Create a presentation about kelp forests"})
    wait(lambda: [m for m in d.message_users(sid) if m["block_on_user"]], "the deck's completion")
    seen = checklists(d.events(sid))
    assert {c["workflow"] for c in seen} == {"deck-generation"} and seen[0]["total"] == 10
    # step n of m: the first event is on step 1 (the skill just loaded), each later one moves forward
    assert seen[0]["current"] == 1 and seen[0]["done"] == 0
    assert [c["done"] for c in seen] == sorted(c["done"] for c in seen) and len(seen) >= 8
    currents = [c["current"] for c in seen]
    assert currents == sorted(currents)
    final = seen[-1]
    assert final["done"] == 9 and final["current"] == 11  # every audited step; the optional one skipped
    assert statuses(final)["research"] == "skipped" and statuses(final)["lint"] == "done"
    on_step = next(c for c in seen if statuses(c)["validate"] == "done")
    assert on_step["current"] == DECK_INDEX["create"]

    # the audited completion ended the workflow's contract: a compaction restores no progress for it
    before = len(d.events(sid))
    assert api.post(f"/sessions/{sid}/compact", json={}).status_code == 200
    wait(lambda: any(e["type"] == "compaction" and e["data"].get("phase") == "applied" for e in d.events(sid)[before:]),
         "the compaction")
    assert checklists(d.events(sid)[before:]) == []
    entries = transcript(stack.data_dir, sid)
    at = max(i for i, e in enumerate(entries) if e["type"] == "compaction")
    assert not [e for e in entries[at:] if e.get("customType") in ("gamma.checklist_progress", "gamma.active_skill")]


def test_progress_of_a_live_workflow_comes_back_after_compaction_and_wake(stack: Stack, api: httpx.Client) -> None:
    d = Driver(stack.redis_url)
    sid = api.post("/sessions", json={}).json()["id"]
    # lint skipped, the refusal ignored: the completion yields unreported and the contract stays live
    prompt = 'eval-policy: {"policy": "deck-generation", "skip": ["lint"], "onAudit": "ignore"}\nA deck about kelp'
    api.post(f"/sessions/{sid}/messages", json={"message": prompt})
    wait(lambda: [m for m in d.message_users(sid) if m["block_on_user"]], "the deck's completion")
    final = checklists(d.events(sid))[-1]
    assert statuses(final)["lint"] == "skipped" and statuses(final)["validate"] == "done"

    # compaction: the progress is published again and restored to the model as an anchor
    before = len(d.events(sid))
    assert api.post(f"/sessions/{sid}/compact", json={}).status_code == 200
    wait(lambda: any(e["type"] == "compaction" and e["data"].get("phase") == "applied" for e in d.events(sid)[before:]),
         "the compaction")
    after = checklists(d.events(sid)[before:])
    assert after and statuses(after[-1]) == statuses(final)
    entries = transcript(stack.data_dir, sid)
    at = max(i for i, e in enumerate(entries) if e["type"] == "compaction")
    anchor = next(e for e in entries[at:] if e.get("customType") == "gamma.checklist_progress")
    assert 'workflow="deck-generation"' in anchor["content"] and "- [done] validate:" in anchor["content"]

    # a wake: the restored session publishes where the workflow stands before anything runs
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    wait(lambda: not d.live(sid), "dormant")
    before = len(d.events(sid))
    api.post(f"/sessions/{sid}/messages", json={"message": "thanks"})
    wait(lambda: any(e["type"] == "status" and e["data"]["status"] == "live" for e in d.events(sid)[before:]),
         "the wake")
    woke = wait(lambda: checklists(d.events(sid)[before:]), "progress after the wake")
    assert statuses(woke[0]) == statuses(final) and woke[0]["done"] == final["done"]
    raw = d.r.xrange(keys.events(sid))
    kinds = [json.loads(f[b"data"])["type"] for _, f in raw][before:]
    assert kinds.index("checklist") < kinds.index("status")  # published while restoring, before live


DECK_INDEX = {s: n for n, s in enumerate(
    ["brief", "brief-check", "plan", "research", "deck-file", "validate", "create", "inspect", "lint",
     "todo-complete"], start=1)}
