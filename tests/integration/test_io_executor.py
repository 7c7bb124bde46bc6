"""Every service's default executor is sized for disk waits (shared/iopool.py, GAMMA_IO_THREADS).

Python sizes it min(32, cpus + 4): 6 threads on the 2-core machine of bench-e2e, where a live file
write's read of its staged blob queued behind the transcript fsyncs of other sessions (docs/architecture.md "Streaming at scale")."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from shared.service import ServiceContext, service_lifespan
from shared.settings import Settings

BLOCKERS = 16  # > cpus + 4 for any machine up to 12 cores: with Python's default, some would wait a turn
BLOCK_S = 0.3


async def _nothing() -> None:
    return None


def _app(redis_url: str, **env: str) -> FastAPI:
    settings = Settings(REDIS_URL=redis_url, **env)  # type: ignore[call-arg]
    ctx = ServiceContext(name="iotest", settings=settings, redis=aioredis.from_url(redis_url))
    app = FastAPI(lifespan=service_lifespan(ctx, _nothing, _nothing))

    @app.get("/blocked")
    async def blocked() -> dict[str, float]:
        """BLOCKERS disk waits at once (a sleeping thread holds no GIL, like one in fsync)."""
        started = time.monotonic()
        await asyncio.gather(*(asyncio.to_thread(time.sleep, BLOCK_S) for _ in range(BLOCKERS)))
        return {"elapsed_s": time.monotonic() - started}

    return app


def _elapsed(app: FastAPI) -> float:
    with TestClient(app) as client:
        return float(client.get("/blocked").json()["elapsed_s"])


async def test_blocking_waits_run_side_by_side_not_six_at_a_time(redis_url: str) -> None:
    """16 threads waiting on the disk at once take one wait, not ceil(16 / 6) = 3 of them."""
    elapsed = await asyncio.to_thread(_elapsed, _app(redis_url))
    assert elapsed < 2 * BLOCK_S, elapsed


async def test_the_pool_size_is_configurable(redis_url: str) -> None:
    elapsed = await asyncio.to_thread(_elapsed, _app(redis_url, GAMMA_IO_THREADS="4"))
    assert elapsed >= 4 * BLOCK_S * 0.95, elapsed  # 16 waits, 4 at a time
