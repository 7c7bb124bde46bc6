"""Waits that resume, on the real stack (five processes, real Redis, the scripted model): a task
that waits on an outside event is `blocked` with its reason while the later tasks stay pending, the
agent yields, and the event (`import.completed`, a steer) starts a turn by itself: the agent
continues with no user message (the seed: "A steering event only starts a turn for an active task";
a waiting task is active work)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.integration.test_notifications_acceptance import entries, injected, post
from tests.integration.test_stale_deck_write import call
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
USER = {"authorization": f"Bearer {API_TOKEN}"}
PLAN = [{"id": "wait", "content": "Wait for import", "status": "blocked", "reason": "waiting for the import service"},
        {"id": "normalize", "content": "Normalize deck", "status": "pending"},
        {"id": "review", "content": "Review and report", "status": "pending"}]


def answers(items: list[dict[str, Any]]) -> list[int]:
    return [i for i, e in enumerate(items) if e.get("type") == "message" and e["message"].get("role") == "toolResult"
            and (e["message"].get("details") or {}).get("blockOnUser")]


def test_an_import_wait_resumes_when_the_import_completes(module_stack: Stack) -> None:
    with httpx.Client(base_url=module_stack.url(), headers=USER, timeout=30) as http:
        sid = str(http.post("/sessions", json={}).json()["id"])
        steps = [call("todo", items=PLAN),
                 call("message_user", message="The import is running.", blockOnUser=True)]
        assert http.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(steps)}).status_code == 202
        first = wait_sync(lambda: items if answers(items := entries(module_stack, sid)) else None, timeout=90,
                          what="the agent's yield", detail=lambda: json.dumps(entries(module_stack, sid))[-3000:])
        todo = [e["message"] for e in first if e.get("type") == "message" and e["message"].get("toolName") == "todo"]
        assert todo and not todo[0]["isError"], "a wait with later tasks pending is a valid plan"
        wait_sync(lambda: not http.get(f"/sessions/{sid}").json()["running"], timeout=60, what="the run's end")

        assert post(module_stack, sid, "imp1").status_code in (200, 202)
        done = wait_sync(lambda: items if replied_after(items := entries(module_stack, sid), "imp1") else None,
                         timeout=90, what="a new turn started by the import's completion",
                         detail=lambda: json.dumps(entries(module_stack, sid))[-1500:])
        users = [i for i, e in enumerate(done) if e.get("type") == "message" and e["message"].get("role") == "user"]
        assert len(users) == 1 and users[0] < injected(done, "imp1")[0], "no user message: the event resumed the task"


def replied_after(items: list[dict[str, Any]], source_id: str) -> bool:
    """The agent answered in a turn that the injection `source_id` started (recorded, then a reply)."""
    at = injected(items, source_id)
    return bool(at) and any(e.get("type") == "message" and e["message"].get("role") == "assistant"
                            for e in items[at[0]:])


def test_a_form_answered_while_dormant_resumes_the_task_at_the_wake(module_stack: Stack) -> None:
    """ask-user-questions' wait: the question task `blocked` with its reason, the form open, the agent
    yields and the session goes dormant. The user answers on the dormant preview; a wake with no user
    message (as an urgent notification's) delivers the answers from the restored state.json, and that
    starts the turn that continues the task."""
    from tests.integration.runtime_support import Driver
    from tests.integration.test_proxy_live import answer_form

    form = {"id": "f_wait", "title": "Audience", "status": "open", "answers": {},
            "fields": [{"id": "who", "label": "Who is the deck for?", "kind": "text", "required": True}]}
    plan = [{"id": "ask", "content": "Ask who the deck is for", "status": "blocked", "reason": "waiting for the user's answer"},
            {"id": "build", "content": "Build the deck", "status": "pending"}]
    steps = [call("todo", items=plan), call("write", path="forms/f_wait.json", content=json.dumps(form)),
             call("show_file", path="forms/f_wait.json"), call("message_user", message="Who is it for?", blockOnUser=True)]
    with httpx.Client(base_url=module_stack.url(), headers=USER, timeout=30) as http:
        sid = str(http.post("/sessions", json={}).json()["id"])
        assert http.post(f"/sessions/{sid}/messages", json={"message": "script:" + json.dumps(steps)}).status_code == 202
        wait_sync(lambda: answers(entries(module_stack, sid)) and not http.get(f"/sessions/{sid}").json()["running"],
                  timeout=90, what="the question's yield")
        assert http.post(f"/sessions/{sid}/suspend").status_code == 200
        wait_sync(lambda: http.get(f"/sessions/{sid}").json()["status"] == "dormant", timeout=30, what="dormant")
        assert answer_form(http, sid, "f_wait", "the board")["status"] == "submitted"

        Driver(module_stack.redis_url).wake(sid)  # no prompt
        source = "form:f_wait:submitted"
        done = wait_sync(lambda: items if replied_after(items := entries(module_stack, sid), source) else None,
                         timeout=90, what="a turn started by the dormant form answer",
                         detail=lambda: json.dumps(entries(module_stack, sid))[-1500:])
        users = [i for i, e in enumerate(done) if e.get("type") == "message" and e["message"].get("role") == "user"]
        assert len(users) == 1 and users[0] < injected(done, source)[0], "no user message: the answer resumed the task"
        assert "the board" in done[injected(done, source)[0]]["content"]
