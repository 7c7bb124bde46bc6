"""Acceptance for remote notifications on the real stack (five processes, real Redis, scripted model).

Recording is observed in the transcript: an injection is a `custom_message` with `details.sourceId`.
A live idle session without an active task keeps a steer injection for the next user turn, so tests
send a prompt to make the runtime record what was delivered.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, SERVICE_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
USER = {"authorization": f"Bearer {API_TOKEN}"}
SERVICE = {"authorization": f"Bearer {SERVICE_TOKEN}"}


def create_session(stack: Stack) -> str:
    r = httpx.post(stack.url() + "/sessions", json={}, headers=USER, timeout=30)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def entries(stack: Stack, sid: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{stack.url()}/sessions/{sid}/transcript", headers=USER, timeout=30)
    assert r.status_code == 200, r.text
    return list(r.json()["entries"])


def user_index(items: list[dict[str, Any]], text: str) -> int | None:
    for i, e in enumerate(items):
        if e.get("type") == "message" and e["message"].get("role") == "user" and e["message"].get("content") == text:
            return i
    return None


def turn_done(items: list[dict[str, Any]], text: str) -> bool:
    at = user_index(items, text)
    if at is None:
        return False
    return any(e.get("type") == "message" and e["message"].get("role") == "toolResult"
               and (e["message"].get("details") or {}).get("blockOnUser") for e in items[at:])


def say(stack: Stack, sid: str, text: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    """Send a prompt and wait until the scripted agent has answered it (message_user blockOnUser)."""
    r = httpx.post(f"{stack.url()}/sessions/{sid}/messages", json={"message": text}, headers=USER, timeout=30)
    assert r.status_code == 202, r.text
    return wait_sync(lambda: items if turn_done(items := entries(stack, sid), text) else None, timeout=timeout_s,
                     interval=0.2, what=f"an answer to {text!r}",
                     detail=lambda: json.dumps(entries(stack, sid))[-2000:])


def injected(items: list[dict[str, Any]], source_id: str) -> list[int]:
    return [i for i, e in enumerate(items) if e.get("type") == "custom_message"
            and (e.get("details") or {}).get("sourceId") == source_id]


def post(stack: Stack, sid: str, nid: str, **extra: Any) -> httpx.Response:
    body = {"session_id": sid, "notification": {"id": nid, "type": "import.completed", "payload": {
        "importId": "imp_" + nid, "sourceRef": "file:uploads/q3.pdf", "outputRefs": ["file:imports/q3.md"]}}}
    body.update(extra)
    return httpx.post(stack.url("notifications") + "/notifications", json=body, headers=SERVICE, timeout=30)


def status(stack: Stack, sid: str, nid: str) -> str:
    client = redis.Redis.from_url(stack.redis_url)
    try:
        value = client.hget(keys.notification_state(sid, nid), "status")
    finally:
        client.close()
    return value.decode() if value else ""


def wait_status(stack: Stack, sid: str, nid: str, want: str, timeout_s: float = 30) -> None:
    wait_sync(lambda: status(stack, sid, nid) == want, timeout=timeout_s, what=f"{nid} {want}",
              detail=lambda: f"{nid} is {status(stack, sid, nid)!r}")


def wait_live(stack: Stack, sid: str, live: bool = True, timeout_s: float = 30) -> None:
    def state() -> str:
        return str(httpx.get(f"{stack.url()}/sessions/{sid}", headers=USER, timeout=30).json()["status"])
    wait_sync(lambda: (state() == "live") == live, timeout=timeout_s, what=f"session {sid} {'live' if live else 'not live'}",
              detail=lambda: f"status {state()}")


def test_bad_requests_are_refused_and_store_nothing(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    url = module_stack.url("notifications") + "/notifications"
    good = {"session_id": sid, "notification": {"id": "x", "type": "approval.resolved", "payload": {
        "approvalId": "a", "decision": "approved", "subject": "s"}}}
    assert httpx.post(url, json=good, timeout=30).status_code == 401
    user_token = httpx.post(url, json=good, headers={"authorization": "Bearer tok-alice"}, timeout=30)
    assert user_token.status_code == 401 and 'error="invalid_token"' in user_token.headers["www-authenticate"]
    unknown = dict(good, notification=dict(good["notification"], type="deploy.finished"))
    assert httpx.post(url, json=unknown, headers=SERVICE, timeout=30).status_code == 422
    malformed = dict(good, notification=dict(good["notification"], payload={"decision": "maybe"}))
    assert httpx.post(url, json=malformed, headers=SERVICE, timeout=30).status_code == 422
    assert httpx.post(url, content=b"[1,2", headers=SERVICE, timeout=30).status_code == 422
    assert httpx.post(url, json=dict(good, session_id="nosuchsession"), headers=SERVICE, timeout=30).status_code == 404
    client = redis.Redis.from_url(module_stack.redis_url)
    try:
        assert client.keys("gamma:{" + sid + "}:notification*") == []
        assert client.keys("gamma:{" + sid + "}:ntf:*") == []
        assert client.keys("gamma:{nosuchsession}:*") == []
    finally:
        client.close()


def test_live_notification_posted_three_times_is_recorded_once(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    say(module_stack, sid, "hello")
    answers = [post(module_stack, sid, "imp-live") for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 200, 200]
    assert [a.json()["duplicate"] for a in answers] == [False, True, True]
    assert answers[0].json()["status"] == "delivered"
    items = say(module_stack, sid, "anything new?")
    assert len(injected(items, "imp-live")) == 1 and len(injected(items, "imp-live#1")) == 1
    first = items[injected(items, "imp-live")[0]]
    assert first["customType"] == "gamma.system_update" and first["details"]["trusted"] is True
    assert items[injected(items, "imp-live#1")[0]]["details"]["injectionType"] == "artifact_update"
    wait_status(module_stack, sid, "imp-live", "consumed")
    assert post(module_stack, sid, "imp-live").json()["status"] == "consumed"
    items = say(module_stack, sid, "and now?")
    assert len(injected(items, "imp-live")) == 1


def test_dormant_notification_waits_for_the_wake_and_precedes_the_prompt(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    r = post(module_stack, sid, "imp-dormant")
    assert r.status_code == 202 and r.json()["status"] == "pending"
    time.sleep(1.0)
    view = httpx.get(f"{module_stack.url()}/sessions/{sid}", headers=USER, timeout=30).json()
    assert view["status"] == "dormant"  # a notification never starts a runtime
    assert injected(entries(module_stack, sid), "imp-dormant") == []
    items = say(module_stack, sid, "I am back")
    [at] = injected(items, "imp-dormant")
    prompt_at = user_index(items, "I am back")
    assert prompt_at is not None and at < prompt_at
    wait_status(module_stack, sid, "imp-dormant", "consumed")


def test_stream_intake_has_the_same_contract(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    body = {"session_id": sid, "notification": {"id": "render-1", "type": "render.completed", "payload": {
        "renderId": "r1", "ref": "gamma:file:d1", "outputRefs": ["file:renders/d1.png"]}}}
    client = redis.Redis.from_url(module_stack.redis_url)
    try:
        for _ in range(2):
            client.xadd(keys.NOTIFICATIONS, {"data": json.dumps(body)})
    finally:
        client.close()
    wait_status(module_stack, sid, "render-1", "pending")
    items = say(module_stack, sid, "wake for the render")
    assert len(injected(items, "render-1")) == 1
    wait_status(module_stack, sid, "render-1", "consumed")


@pytest.mark.slow
def test_kill_notifications_between_delivery_and_record(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    say(module_stack, sid, "hi")
    assert post(module_stack, sid, "imp-kill-n").json()["status"] == "delivered"  # queued, not recorded
    module_stack.kill("notifications")
    module_stack.start("notifications")
    items = say(module_stack, sid, "after the notification service restarted")
    assert len(injected(items, "imp-kill-n")) == 1
    wait_status(module_stack, sid, "imp-kill-n", "consumed")
    assert post(module_stack, sid, "imp-kill-n").json() == {
        "id": "imp-kill-n", "session_id": sid, "duplicate": True, "status": "consumed"}


@pytest.mark.slow
def test_kill_runtime_between_delivery_and_record(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    say(module_stack, sid, "hi there")
    assert post(module_stack, sid, "imp-kill-r").json()["status"] == "delivered"
    module_stack.kill("runtime")  # the queued injection dies with it; the inbox entry stays unacked
    module_stack.start("runtime")
    wait_live(module_stack, sid, live=False)  # the dead holder's lease expires
    items = say(module_stack, sid, "after the runtime restarted")
    at = injected(items, "imp-kill-r")
    assert len(at) == 1 and len(injected(items, "imp-kill-r#1")) == 1
    prompt_at = user_index(items, "after the runtime restarted")
    assert prompt_at is not None and at[0] < prompt_at
    wait_status(module_stack, sid, "imp-kill-r", "consumed")
