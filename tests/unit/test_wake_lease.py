"""A wake of a long history never outlives its lease, and a wake that fails is told to the user
(docs/architecture.md "How a session wakes"): the read runs while the lease is renewed every third of
its TTL (`lease.py` `renewing`); a renewal that fails stops the wake; the failure is an `error` event."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from services.runtime.live.events import Outbox, tell_wake_failed
from services.runtime.live.lease import Lease, LeaseLost, renewing
from services.runtime.live.sender import EventSender
from shared.redis import keys


async def test_a_read_longer_than_the_lease_keeps_it(redis_client: aioredis.Redis) -> None:
    lease = await Lease.acquire(redis_client, "long-read", "w1", 300)
    assert lease is not None

    async def read() -> str:
        await asyncio.sleep(1.0)  # more than three lease lengths
        return "read"

    assert await renewing(lease, read()) == "read"
    lease.held_now()
    assert await redis_client.get(keys.lease("long-read")) == lease.value.encode()


async def test_a_lease_taken_meanwhile_stops_the_wake(redis_client: aioredis.Redis) -> None:
    lease = await Lease.acquire(redis_client, "taken", "w1", 300)
    assert lease is not None
    await redis_client.set(keys.lease("taken"), "w2:99")  # another worker holds it now
    finished: list[bool] = []

    async def read() -> None:
        await asyncio.sleep(2.0)
        finished.append(True)

    with pytest.raises(LeaseLost):
        await renewing(lease, read())
    assert finished == [] and lease.lost


async def test_a_failed_wake_is_an_error_event(redis_client: aioredis.Redis) -> None:
    sender = EventSender(redis_client)
    published: list[Any] = []

    async def bus(stream: str, message: Any) -> None:
        published.append(message)

    await tell_wake_failed(Outbox(sender, "failed-wake", bus), LeaseLost("failed-wake"))
    events = [json.loads(f[b"data"]) for _, f in await redis_client.xrange(keys.events("failed-wake"))]
    assert [(e["type"], e["data"]["source"], e["data"]["kind"]) for e in events] == [("error", "wake", "LeaseLost")]
