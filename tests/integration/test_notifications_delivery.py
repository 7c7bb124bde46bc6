"""Notification intake and delivery against a real Redis, in process: the HTTP route, the store, live and
wake delivery, consumption on record and redelivery. The lease holder is faked (a lease key + XRANGE)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from services.notifications.delivery import Delivery
from services.notifications.http import make_router
from services.notifications.settle import wait_for_group
from shared.contracts.streams.inbox import INBOX_ADAPTER, Barrier, Injection
from shared.contracts.streams.lifecycle import SessionLive
from shared.contracts.streams.recorded import InjectionRecorded
from shared.redis import keys
from shared.streams.bus import ensure_group

TOKEN = "svc-secret"
SID = "s_notify"


def body(nid: str = "n1", sid: str = SID, type_: str = "import.completed", **payload: Any) -> dict[str, Any]:
    p = payload or {"importId": "imp_1", "sourceRef": "file:uploads/a.pdf", "outputRefs": ["file:imports/a.md"]}
    return {"session_id": sid, "notification": {"id": nid, "type": type_, "payload": p}}


@pytest.fixture
async def delivery(redis_client: aioredis.Redis) -> Delivery:
    await redis_client.hset(keys.session_row(SID), mapping={"id": SID, "owner": "alice", "status": "dormant"})
    return Delivery(redis_client, settle_timeout_s=0.5)


@pytest.fixture
async def http(delivery: Delivery) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(make_router(delivery, TOKEN, 2 * 1024 * 1024))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://n") as client:
        yield client


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def inbox(client: aioredis.Redis, sid: str = SID) -> list[Any]:
    return [INBOX_ADAPTER.validate_json(f[b"data"]) for _, f in await client.xrange(keys.inbox(sid))]


def recorded(inj: Injection) -> InjectionRecorded:
    return InjectionRecorded(session_id=inj.session_id, source=inj.source, source_id=inj.source_id,
                             entry_id="e_" + inj.source_id)


async def test_bad_requests_are_4xx_and_store_nothing(http: httpx.AsyncClient, redis_client: aioredis.Redis) -> None:
    before = set(await redis_client.keys("*"))
    assert (await http.post("/notifications", json=body())).status_code == 401
    assert (await http.post("/notifications", json=body(), headers={"authorization": "Basic x"})).status_code == 401
    # An unknown token (not the service token, not a JWT) is 401 with an RFC 6750 challenge, as at the proxy.
    r = await http.post("/notifications", json=body(), headers=auth("wrong"))
    assert r.status_code == 401 and r.json()["error"] == "unknown bearer token"
    assert r.headers["www-authenticate"] == 'Bearer error="invalid_token", error_description="unknown bearer token"'
    r = await http.post("/notifications", json=body(type_="import.exploded"), headers=auth())
    assert r.status_code == 422 and r.json()["error"] == "invalid notification"
    r = await http.post("/notifications", content=b"{not json", headers=auth())
    assert r.status_code == 422
    r = await http.post("/notifications", json=body(nid="bad id with spaces"), headers=auth())
    assert r.status_code == 422
    r = await http.post("/notifications", json=body(type_="render.completed", renderId="r"), headers=auth())
    assert r.status_code == 422  # payload missing required fields
    r = await http.post("/notifications", json=body(sid="nobody"), headers=auth())
    assert r.status_code == 404 and "nobody" in r.json()["error"]
    big = json.dumps(body(importId="i", sourceRef="x" * 300_000, outputRefs=[])).encode()
    r = await http.post("/notifications", content=big, headers=auth() | {"content-type": "application/json"})
    assert r.status_code == 413 and "limit" in r.json()["error"]
    assert set(await redis_client.keys("*")) == before


async def test_live_posted_three_times_is_delivered_once(http: httpx.AsyncClient, redis_client: aioredis.Redis,
                                                         delivery: Delivery) -> None:
    await redis_client.set(keys.lease(SID), "w1:1")
    answers = [await http.post("/notifications", json=body(), headers=auth()) for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 200, 200]
    assert [a.json()["duplicate"] for a in answers] == [False, True, True]
    assert answers[0].json()["status"] == "delivered"
    msgs = await inbox(redis_client)
    assert [m.source_id for m in msgs] == ["n1", "n1#1"]
    assert [m.injection.kind for m in msgs] == ["system_update", "artifact_update"]
    # Consumed only when every part is recorded (and a repeated record counts once).
    await delivery.on_recorded(recorded(msgs[0]))
    await delivery.on_recorded(recorded(msgs[0]))
    assert await delivery.store.status(SID, "n1") == "delivered"
    await delivery.on_recorded(recorded(msgs[1]))
    assert await delivery.store.status(SID, "n1") == "consumed"
    assert await redis_client.zcard(keys.notifications_pending(SID)) == 0
    again = await http.post("/notifications", json=body(), headers=auth())
    assert again.json() == {"id": "n1", "session_id": SID, "duplicate": True, "status": "consumed"}
    assert len(await inbox(redis_client)) == 2


async def test_dormant_waits_for_the_wake_then_barrier(http: httpx.AsyncClient, redis_client: aioredis.Redis,
                                                       delivery: Delivery) -> None:
    r1 = await http.post("/notifications", json=body(nid="a"), headers=auth())
    r2 = await http.post("/notifications", json=body(nid="b", type_="approval.resolved", approvalId="ap",
                                                     decision="approved", subject="publish"), headers=auth())
    assert r1.json()["status"] == r2.json()["status"] == "pending"
    assert await inbox(redis_client) == []  # never starts a runtime, never touches the inbox
    assert not await redis_client.exists(keys.WAKE)

    await redis_client.set(keys.lease(SID), "w1:1")
    await delivery.on_live(SessionLive(session_id=SID, wake_id="wake1", fence=1, worker_id="w1"))
    msgs = await inbox(redis_client)
    assert [getattr(m, "source_id", None) for m in msgs] == ["a", "a#1", "b", None]
    assert isinstance(msgs[-1], Barrier) and msgs[-1].wake_id == "wake1"

    # Only "a" is recorded before the runtime dies; the next wake delivers "b" again, then a barrier.
    for m in msgs[:2]:
        await delivery.on_recorded(recorded(m))
    await delivery.on_live(SessionLive(session_id=SID, wake_id="wake2", fence=2, worker_id="w2"))
    msgs = await inbox(redis_client)
    assert [getattr(m, "source_id", None) for m in msgs[4:]] == ["b", None]
    assert msgs[-1].wake_id == "wake2"
    state = await delivery.store.state(SID, "b")
    assert state["status"] == "delivered" and state["deliveries"] == "2"


async def test_barrier_waits_for_the_digest_group(redis_client: aioredis.Redis) -> None:
    await ensure_group(redis_client, keys.ARTIFACT_CHANGES, "digest")
    await redis_client.xadd(keys.ARTIFACT_CHANGES, {"data": "{}"})
    # Unread by the digest: the wait gives up after its timeout.
    assert not await wait_for_group(redis_client, [keys.ARTIFACT_CHANGES], timeout_s=0.3)
    reply = await redis_client.xreadgroup("digest", "d1", {keys.ARTIFACT_CHANGES: ">"}, count=10)
    [(entry_id, _)] = reply[0][1]

    async def ack_later() -> None:
        await asyncio.sleep(0.2)
        await redis_client.xack(keys.ARTIFACT_CHANGES, "digest", entry_id)

    task = asyncio.create_task(ack_later())
    assert not await wait_for_group(redis_client, [keys.ARTIFACT_CHANGES], timeout_s=0.05)  # read, not acked
    assert await wait_for_group(redis_client, [keys.ARTIFACT_CHANGES], timeout_s=3.0)
    await task
    # No such stream or group: nothing to wait for.
    assert await wait_for_group(redis_client, ["gamma:nothing"], timeout_s=0.1)


async def test_a_sessions_barrier_waits_only_for_its_own_entries(redis_client: aioredis.Redis) -> None:
    """Another session's change in flight (read, unacked) or unread does not hold this session's
    barrier; its own, read or not, does until the digest acks it."""
    stream = keys.ARTIFACT_CHANGES
    await ensure_group(redis_client, stream, "digest")
    await redis_client.xadd(stream, {"data": '{"session_id": "s_other_in_flight"}'})
    await redis_client.xreadgroup("digest", "d1", {stream: ">"}, count=10)  # pending, never acked
    await redis_client.xadd(stream, {"data": '{"session_id": "s_other_unread"}'})
    # Settled (True), not timed out: the other sessions' entries stay unacked, so waiting on them never ends.
    assert await wait_for_group(redis_client, [stream], timeout_s=10.0, session="s_mine")
    assert not await wait_for_group(redis_client, [stream], timeout_s=0.2)  # the whole group: still busy
    mine = await redis_client.xadd(stream, {"data": '{"session_id": "s_mine"}'})
    assert not await wait_for_group(redis_client, [stream], timeout_s=0.2, session="s_mine")  # unread
    await redis_client.xreadgroup("digest", "d1", {stream: ">"}, count=10)
    assert not await wait_for_group(redis_client, [stream], timeout_s=0.2, session="s_mine")  # read, unacked

    async def ack_later() -> None:
        await asyncio.sleep(0.2)
        await redis_client.xack(stream, "digest", mine)

    task = asyncio.create_task(ack_later())
    assert await wait_for_group(redis_client, [stream], timeout_s=3.0, session="s_mine")
    await task


async def test_urgency_policy_hook_can_wake(redis_client: aioredis.Redis) -> None:
    from services.notifications.policy import wake_for_types
    from shared.contracts.streams.notifications import NotificationSubmit

    await redis_client.hset(keys.session_row("s_urgent"), "id", "s_urgent")
    woken: list[str] = []

    async def send_wake(sid: str, _n: Any) -> None:
        woken.append(sid)

    d = Delivery(redis_client, urgency=wake_for_types("approval.resolved"), send_wake=send_wake)
    await d.submit(NotificationSubmit.model_validate(body(nid="x", sid="s_urgent")))
    assert woken == []
    await d.submit(NotificationSubmit.model_validate(body(nid="y", sid="s_urgent", type_="approval.resolved",
                                                          approvalId="a", decision="approved", subject="s")))
    assert woken == ["s_urgent"]


async def test_barrier_follows_the_digest_only_while_it_runs(redis_client: aioredis.Redis,
                                                             delivery: Delivery) -> None:
    await ensure_group(redis_client, keys.LIFECYCLE, "digest")
    # This session's SessionLive the digest has not handled (only the session's own entries count).
    await redis_client.xadd(keys.LIFECYCLE, {"data": json.dumps({"type": "session_live", "session_id": SID})})
    live = SessionLive(session_id=SID, wake_id="w", fence=1, worker_id="w1")
    loop = asyncio.get_running_loop()
    start = loop.time()
    await delivery.on_live(live)  # no digest heartbeat: no waiting
    assert loop.time() - start < 0.4
    await redis_client.set(keys.health("digest"), "1", px=5000)
    start = loop.time()
    await delivery.on_live(live)  # a running digest that lags: bounded wait (0.5 s here), then the barrier
    assert loop.time() - start >= 0.5
    msgs = await inbox(redis_client)
    assert [type(m).__name__ for m in msgs] == ["Barrier", "Barrier"]
