"""Every service's default executor is sized for disk waits (shared/pools/iopool.py, GAMMA_IO_THREADS).

Python sizes it min(32, cpus + 4): 6 threads on the 2-core machine of bench-e2e, where a live file
write's read of its staged blob queued behind the transcript fsyncs of other sessions (docs/architecture.md "Streaming at scale").
Counted in threads that wait at once, not in seconds."""

from __future__ import annotations

import asyncio
import threading

import redis.asyncio as aioredis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from shared.serving.service import ServiceContext, service_lifespan
from shared.settings import Settings

BLOCKERS = 16  # > cpus + 4 for any machine up to 12 cores: with Python's default, some would wait a turn
ALL_IN_S = 30.0  # how long a waiter waits for the others to be waiting too (generous: a loaded machine)


async def _nothing() -> None:
    return None


def _app(redis_url: str, **env: str) -> FastAPI:
    settings = Settings(REDIS_URL=redis_url, **env)
    ctx = ServiceContext(name="iotest", settings=settings, redis=aioredis.from_url(redis_url))
    app = FastAPI(lifespan=service_lifespan(ctx, _nothing, _nothing))

    @app.get("/blocked")
    async def blocked(expect: int) -> dict[str, int]:
        """BLOCKERS disk-like waits at once (a waiting thread holds no GIL, like one in fsync): each
        waits until `expect` of them wait side by side, or gives up; the most seen at once is returned."""
        lock, arrived = threading.Lock(), threading.Condition()
        state = {"waiting": 0, "most": 0}

        def wait() -> None:
            with lock:
                state["waiting"] += 1
                state["most"] = max(state["most"], state["waiting"])
            with arrived:
                arrived.notify_all()
                arrived.wait_for(lambda: state["most"] >= expect, timeout=ALL_IN_S)
            with lock:
                state["waiting"] -= 1

        await asyncio.gather(*(asyncio.to_thread(wait) for _ in range(BLOCKERS)))
        return {"most": state["most"]}

    return app


def _most_at_once(app: FastAPI, expect: int) -> int:
    with TestClient(app) as client:
        return int(client.get("/blocked", params={"expect": expect}, timeout=3 * ALL_IN_S).json()["most"])


async def test_blocking_waits_run_side_by_side_not_six_at_a_time(redis_url: str) -> None:
    """All 16 threads wait at once, not ceil(16 / 6) = 3 rounds of them."""
    assert await asyncio.to_thread(_most_at_once, _app(redis_url), BLOCKERS) == BLOCKERS


async def test_the_pool_size_is_configurable(redis_url: str) -> None:
    """With 4 threads the waits go 4 at a time: never a fifth beside them (Python's default, 6 or
    more, would have more waiting at once)."""
    most = await asyncio.to_thread(_most_at_once, _app(redis_url, GAMMA_IO_THREADS="4"), 4)
    assert most == 4
