"""The consumer stall watchdog the digest runs (shared/streams/watchdog.py), against a real Redis."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from shared.serving.service import ServiceContext, add_health_routes
from shared.settings import Settings
from shared.streams.bus import ensure_group
from shared.streams.watchdog import StallWatchdog

STREAM = "gamma:test:watchdog"


async def test_a_group_that_stops_taking_entries_is_reported_and_not_ready(
    redis_client: aioredis.Redis, redis_url: str
) -> None:
    """Entries wait and the group's last-delivered id does not move (a dead subscriber, a handler that
    never returns): stalled after `stall_s`, `on_stall` runs, /readyz fails."""
    await ensure_group(redis_client, STREAM, "g")
    calls: list[list[str]] = []
    dog = StallWatchdog(redis_client, stall_s=0.3, poll_s=0.05, on_stall=calls.append)
    await redis_client.xadd(STREAM, {"data": "1"})
    await redis_client.xreadgroup("g", "c", {STREAM: ">"})  # a live consumer took it
    assert await dog.check() == []
    await redis_client.xadd(STREAM, {"data": "2"})  # ... and then stopped reading
    task = asyncio.create_task(dog.run())
    try:
        for _ in range(100):
            if calls:
                break
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
    assert calls == [[f"{STREAM} (g)"]] and dog.stalled == [f"{STREAM} (g)"]

    settings = Settings(REDIS_URL=redis_url)
    ctx = ServiceContext(name="digest", settings=settings, redis=aioredis.from_url(redis_url), ready=True)
    ctx.watchdog = dog
    app = FastAPI()
    add_health_routes(app, ctx)
    resp = await asyncio.to_thread(lambda: TestClient(app).get("/readyz"))
    assert resp.status_code == 503 and resp.json()["groups"] == [f"{STREAM} (g)"]


async def test_a_consumer_that_keeps_up_is_never_stalled(redis_client: aioredis.Redis) -> None:
    await ensure_group(redis_client, STREAM, "g")
    dog = StallWatchdog(redis_client, stall_s=0.2, poll_s=0.05, on_stall=lambda _: None)
    for i in range(6):
        await redis_client.xadd(STREAM, {"data": str(i)})
        assert await dog.check() == []  # waiting, but not for stall_s yet
        await asyncio.sleep(0.1)
        await redis_client.xreadgroup("g", "c", {STREAM: ">"})  # the group moves on
    assert await dog.check() == []
