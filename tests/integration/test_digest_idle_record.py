"""Issue 20: a digest update for an idle agent is recorded at once, not held for the next prompt (five
processes, real Redis, scripted model; services/runtime/idle.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import redis

from shared import keys
from tests.integration.runtime_support import stream_payloads
from tests.support.stack import API_TOKEN, Stack

pytestmark = pytest.mark.timeout(180)
USER = {"authorization": f"Bearer {API_TOKEN}"}
BRIEF = "file:brief.xml"
BRIEF_TEXT = "<brief>\n  <audience>board</audience>\n</brief>\n"
DIGEST = "The user changed the audience."


def entries(stack: Stack, sid: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{stack.url()}/sessions/{sid}/transcript", headers=USER, timeout=30)
    assert r.status_code == 200, r.text
    return list(r.json()["entries"])


def is_user(e: dict[str, Any], text: str | None = None) -> bool:
    return (e.get("type") == "message" and e["message"].get("role") == "user"
            and (text is None or e["message"].get("content") == text))


def answered(items: list[dict[str, Any]], text: str) -> bool:
    at = next((i for i, e in enumerate(items) if is_user(e, text)), None)
    return at is not None and any(e.get("type") == "message" and e["message"].get("role") == "toolResult"
                                  and (e["message"].get("details") or {}).get("blockOnUser") for e in items[at:])


def say(stack: Stack, sid: str, text: str) -> list[dict[str, Any]]:
    r = httpx.post(f"{stack.url()}/sessions/{sid}/messages", json={"message": text}, headers=USER, timeout=30)
    assert r.status_code == 202, r.text
    deadline = time.time() + 60
    while not answered(items := entries(stack, sid), text):
        assert time.time() < deadline, f"no answer to {text!r}"
        time.sleep(0.1)
    return items


def updates(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in items if e.get("customType") == "gamma.artifact_update" and e["details"].get("ref") == BRIEF
            and DIGEST in e["content"]]


def told(items: list[dict[str, Any]], text: str) -> str:
    """What the scripted model's answer to `text` says it received (it names each injection)."""
    at = next(i for i, e in enumerate(items) if is_user(e, text))
    for e in items[at:]:
        for c in e["message"].get("content", []) if e.get("type") == "message" else []:
            if isinstance(c, dict) and c.get("type") == "toolCall" and c.get("name") == "message_user":
                return str(c["arguments"]["message"])
    raise AssertionError("no message_user answer")


def test_idle_digest_update_is_recorded_at_once_and_reaches_the_next_model_call_once(module_stack: Stack) -> None:
    r = httpx.post(module_stack.url() + "/sessions", json={}, headers=USER, timeout=30)
    assert r.status_code == 201, r.text
    sid = str(r.json()["id"])
    setup = "script:" + json.dumps([
        {"tool_calls": [{"name": "write", "arguments": {"path": "brief.xml", "content": BRIEF_TEXT}}]},
        {"tool_calls": [{"name": "message_user", "arguments": {"message": "Brief ready.", "blockOnUser": True}}]}])
    say(module_stack, sid, setup)  # woken by this prompt; now idle, no active task

    r = httpx.put(f"{module_stack.url()}/sessions/{sid}/workspace/files/brief.xml",
                  content=BRIEF_TEXT.replace("board", "engineers").encode(),
                  headers=USER | {"x-gamma-digest": DIGEST}, timeout=30)
    assert r.status_code == 200, r.text
    saved = time.time()
    while not updates(items := entries(module_stack, sid)):
        # The digest's debounce is ~250 ms; held for the next turn it never came without a prompt.
        assert time.time() - saved < 3.0, "the idle session's update was not recorded without a prompt"
        time.sleep(0.05)
    time.sleep(1.0)  # a second record (or a redelivery recorded again) would show by now
    items = entries(module_stack, sid)
    assert len(updates(items)) == 1 and not [e for e in items if is_user(e, "what changed?")]
    assert updates(items)[0]["details"]["trusted"] is True and updates(items)[0]["details"]["source"] == "artifact"
    r_ = redis.Redis.from_url(module_stack.redis_url)
    assert int(r_.xpending(keys.inbox(sid), keys.RUNTIME_GROUP)["pending"]) == 0  # acked once recorded
    recorded = [p for p in stream_payloads(r_, keys.INJECTIONS_RECORDED) if p["session_id"] == sid
                and p.get("ref") == BRIEF]
    assert [p["entry_id"] for p in recorded][-1:] == [updates(items)[0]["id"]]  # the digest heard

    items = say(module_stack, sid, "what changed?")
    assert len(updates(items)) == 1  # not recorded again with the turn
    user_at = next(i for i, e in enumerate(items) if is_user(e, "what changed?"))
    assert items.index(updates(items)[0]) < user_at
    assert told(items, "what changed?").count(f"artifact_update (ref={BRIEF})") == 1
