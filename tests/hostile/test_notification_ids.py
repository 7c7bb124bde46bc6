"""Notification ids are data, never key names; a reused id with another notification
is a 409, not a silent duplicate; legacy raw-id keys are still delivered.

Real stack (five processes, real Redis, scripted model): ids that once aliased the store's own keys are
posted to a dormant session, the session is woken with a prompt, and every one must be recorded in the
transcript, including a notification posted after them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from tests.integration.test_notifications_acceptance import (
    SERVICE,
    create_session,
    entries,
    injected,
    post,
    say,
)
from tests.support.polling import wait_sync
from tests.support.stack import Stack

pytestmark = pytest.mark.timeout(180)


def notifications_url(stack: Stack) -> str:
    return stack.url("notifications") + "/notifications"


def wait_recorded(stack: Stack, sid: str, source_ids: list[str], timeout_s: float = 30) -> list[dict[str, Any]]:
    def all_recorded() -> list[dict[str, Any]] | None:
        items = entries(stack, sid)
        return None if any(not injected(items, s) for s in source_ids) else items
    return wait_sync(all_recorded, timeout=timeout_s, interval=0.2, what=f"{source_ids} recorded",
                     detail=lambda: f"missing {[s for s in source_ids if not injected(entries(stack, sid), s)]}")


@pytest.mark.parametrize("first,second", [("Y:state", "Y"), ("Z", "Z:state")])
def test_ids_that_look_like_store_keys_are_all_delivered(module_stack: Stack, first: str, second: str) -> None:
    sid = create_session(module_stack)  # dormant: both stay pending until the wake
    answers = [post(module_stack, sid, first), post(module_stack, sid, second)]
    assert [r.status_code for r in answers] == [202, 202], [r.text for r in answers]
    assert [r.json()["duplicate"] for r in answers] == [False, False]
    # The wake's SessionLive delivers both (not WRONGTYPE, five failures and a dead letter).
    say(module_stack, sid, f"wake for {first} and {second}")
    wait_recorded(module_stack, sid, [first, second])
    # A later notification still reaches the session.
    later = f"later-{second}"
    assert post(module_stack, sid, later).status_code == 202
    say(module_stack, sid, "anything after that?")
    items = wait_recorded(module_stack, sid, [later])
    for nid in (first, second, later):
        assert len(injected(items, nid)) == 1, nid


def test_a_reused_id_with_another_notification_is_a_conflict(module_stack: Stack) -> None:
    sid = create_session(module_stack)
    assert post(module_stack, sid, "imp-reuse").status_code == 202
    same = post(module_stack, sid, "imp-reuse")
    assert same.status_code == 200 and same.json()["duplicate"] is True
    body = {"session_id": sid, "notification": {"id": "imp-reuse", "type": "import.completed", "payload": {
        "importId": "imp_other", "sourceRef": "file:uploads/other.pdf", "outputRefs": []}}}
    other = httpx.post(notifications_url(module_stack), json=body, headers=SERVICE, timeout=30)
    assert other.status_code == 409, other.text
    assert "imp-reuse" in other.json()["error"] and other.json()["detail"] == {"id": "imp-reuse"}
    client = redis.Redis.from_url(module_stack.redis_url)
    try:
        stored = json.loads(client.get(keys.notification(sid, "imp-reuse")) or b"{}")
        assert stored["notification"]["payload"]["importId"] == "imp_imp-reuse"  # the first one stands
        # The stream intake refuses it too (logged, acked): the record is unchanged.
        client.xadd(keys.NOTIFICATIONS, {"data": json.dumps(body)})
        wait_sync(lambda: "notification_id_conflict" in module_stack.log("notifications"), timeout=15,
                  what="the stream intake refusing the reused id")
        stored = json.loads(client.get(keys.notification(sid, "imp-reuse")) or b"{}")
        assert stored["notification"]["payload"]["importId"] == "imp_imp-reuse"
    finally:
        client.close()
    say(module_stack, sid, "wake once")
    items = wait_recorded(module_stack, sid, ["imp-reuse"])
    assert len(injected(items, "imp-reuse")) == 1
    assert "imp_other" not in json.dumps(items)


def _legacy_record(sid: str, nid: str) -> str:
    return json.dumps({"session_id": sid, "received_at": int(time.time() * 1000), "parts": 1, "notification": {
        "id": nid, "type": "import.completed", "payload": {
            "importId": "imp_" + nid, "sourceRef": "file:uploads/q3.pdf", "outputRefs": ["file:imports/q3.md"]}}})


def test_keys_written_before_the_fix_are_moved_and_delivered(module_stack: Stack) -> None:
    """Legacy raw-id keys as the store wrote them, including the colliding pair's shapes."""
    sid = create_session(module_stack)
    prefix = "gamma:{" + sid + "}:notification:"
    client = redis.Redis.from_url(module_stack.redis_url)
    try:
        for nid in ("old-1", "old:state"):
            client.set(prefix + nid, _legacy_record(sid, nid))
            client.hset(prefix + nid + ":state", mapping={"status": "pending", "parts": 1, "recorded": 0,
                                                           "deliveries": 0})
            client.zadd(keys.notifications_pending(sid), {nid: time.time() * 1000})
        client.delete("gamma:migrations:notification-keys-hashed")
        module_stack.restart("notifications")
        assert client.keys(prefix + "*") == []
        for nid in ("old-1", "old:state"):
            assert client.type(keys.notification(sid, nid)) == b"string"
            assert client.hget(keys.notification_state(sid, nid), "status") == b"pending"
        # The repeat of a moved id is still recognised as one.
        again = httpx.post(notifications_url(module_stack), headers=SERVICE, timeout=30, json={
            "session_id": sid, "notification": json.loads(_legacy_record(sid, "old-1"))["notification"]})
        assert again.status_code == 200 and again.json()["duplicate"] is True
    finally:
        client.close()
    say(module_stack, sid, "wake for the old notifications")
    wait_recorded(module_stack, sid, ["old-1", "old:state"])
