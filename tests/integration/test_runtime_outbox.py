"""The runtime's Outbox: progress events never hold up a run yet reach the session's event stream in
the engine's order, fenced like every other write."""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from services.runtime.live.events import Outbox
from services.runtime.live.lease import LeaseLost
from services.runtime.live.sender import EventSender
from shared.redis import keys
from tests.support.polling import eventually


async def published(client: aioredis.Redis, sid: str) -> list[str]:
    return [json.loads(f[b"data"])["data"]["n"] for _, f in await client.xrange(keys.events(sid))]


async def bus(*_: object) -> None:
    return None


async def test_progress_events_go_out_in_order_before_the_next_awaited_event(redis_client: aioredis.Redis) -> None:
    out = Outbox(EventSender(redis_client), "ob1", bus)
    for n in range(50):
        await out.event("message_update", {"n": n}, wait=False)  # returns at once: no round trip
    await out.event("message_end", {"n": 50})
    assert await published(redis_client, "ob1") == list(range(51))
    await out.event("message_update", {"n": 51}, wait=False)
    async def last_sent() -> bool:  # by the background send, without any later event
        return (await published(redis_client, "ob1"))[-1] == 51
    await eventually(last_sent, timeout=10, what="the background send of the last update")


async def test_a_fenced_out_worker_sends_no_queued_progress(redis_client: aioredis.Redis) -> None:
    held = True

    async def fence() -> None:
        if not held:
            raise LeaseLost("ob2")

    out = Outbox(EventSender(redis_client), "ob2", bus, fence=fence)
    await out.event("message_update", {"n": 0}, wait=False)
    await out.event("message_end", {"n": 1})
    held = False
    await out.event("message_update", {"n": 2}, wait=False)
    with pytest.raises(LeaseLost):
        await out.event("message_end", {"n": 3})
    await out.event("status", {"n": 4}, fenced=False)  # after giving the lease up: the queue is dropped
    assert await published(redis_client, "ob2") == [0, 1, 4]
