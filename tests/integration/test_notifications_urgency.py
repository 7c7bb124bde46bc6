"""The urgency policy as configured (`GAMMA_URGENT_NOTIFICATION_TYPES`, services/notifications/policy.py),
on the real stack: an urgent notification wakes a dormant session, a normal one waits for the user."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.redis import keys
from shared.settings import Settings
from tests.integration.runtime_support import stream_payloads
from tests.integration.test_notifications_acceptance import (
    USER,
    create_session,
    status,
    wait_live,
)
from tests.support.polling import wait_sync
from tests.support.stack import SERVICE_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
SERVICE = {"authorization": f"Bearer {SERVICE_TOKEN}"}


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=Path(tmp_path_factory.mktemp("urgency")),
              env_overrides={"GAMMA_URGENT_NOTIFICATION_TYPES": "approval.resolved"})
    try:
        s.start()
        yield s
    finally:
        s.stop()


def submit(stack: Stack, sid: str, notification: dict[str, Any]) -> httpx.Response:
    return httpx.post(stack.url("notifications") + "/notifications", json={"session_id": sid, "notification": notification},
                      headers=SERVICE, timeout=30)


def notification_wakes(stack: Stack, sid: str) -> list[dict[str, Any]]:
    r = redis.Redis.from_url(stack.redis_url)
    try:
        return [w for w in stream_payloads(r, keys.WAKE) if w.get("session_id") == sid and w.get("reason") == "notification"]
    finally:
        r.close()


def test_an_urgent_type_wakes_a_dormant_session_and_a_normal_one_does_not(stack: Stack) -> None:
    sid = create_session(stack)
    normal = {"id": "render-1", "type": "render.completed",
              "payload": {"renderId": "r1", "ref": "gamma:file:deck", "outputRefs": ["file:renders/deck.pdf"]}}
    r = submit(stack, sid, normal)
    assert r.status_code == 202 and r.json()["status"] == "pending", r.text
    # the wake decision is taken before the 202: a normal type published none, the session stays dormant
    assert notification_wakes(stack, sid) == []
    assert httpx.get(f"{stack.url()}/sessions/{sid}", headers=USER, timeout=30).json()["status"] == "dormant"
    assert status(stack, sid, "render-1") == "pending"

    urgent = {"id": "approval-1", "type": "approval.resolved",
              "payload": {"approvalId": "a1", "decision": "approved", "subject": "Publish the Q3 deck"}}
    r = submit(stack, sid, urgent)
    assert r.status_code == 202, r.text
    assert len(notification_wakes(stack, sid)) == 1
    wait_live(stack, sid)  # the runtime took the session: both pending notifications are delivered
    # ... and an idle agent's steers are recorded soon after (docs/architecture.md "Idle recording"):
    # delivered, or consumed already, whichever the poll sees first
    for nid in ("approval-1", "render-1"):
        wait_sync(lambda n=nid: status(stack, sid, n) in ("delivered", "consumed"), timeout=30,  # type: ignore[misc]
                  what=f"{nid} delivered")


def test_an_unknown_urgent_type_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="unknown notification type"):
        Settings(urgent_notification_types="approval.resolved, nope.done")
    assert Settings(urgent_notification_types="approval.resolved,import.completed").notifications.urgent_types == {
        "approval.resolved", "import.completed"}
