"""Run a service's real FastAPI app (its real broker, subscriptions and handlers) inside the test's
event loop, by entering its lifespan: contract tests feed it through the producers' real code."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from faststream.redis import RedisBroker

from scripted import FACTORY
from shared.settings import Settings
from shared.streams.bus import make_broker
from tests.support.ports import free_port


def settings_for(redis_url: str, data_dir: Path, **extra: object) -> Settings:
    values: dict[str, object] = {"REDIS_URL": redis_url, "GAMMA_DATA_DIR": str(data_dir), "OPENAI_API_KEY": None, "GAMMA_MODEL_FACTORY": FACTORY,
                                 "GAMMA_CLAIM_IDLE_MS": 1500, "GAMMA_DIGEST_DEBOUNCE_MS": 100,
                                 # tests read stream history; tests/hostile/test_stream_growth.py tests trimming
                                 "GAMMA_STREAM_TRIM_INTERVAL_S": 3600,
                                 # the public services' internal ports: never their fixed defaults, which
                                 # another test process (pytest-xdist) may be serving at the same time
                                 "GAMMA_PROXY_METRICS_PORT": free_port(), "GAMMA_NOTIFICATIONS_METRICS_PORT": free_port(),
                                 **extra}
    return Settings(**values)


@asynccontextmanager
async def running(create_app: Callable[[Settings], FastAPI], settings: Settings) -> AsyncIterator[FastAPI]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def connected_broker(redis_url: str) -> AsyncIterator[RedisBroker]:
    broker = make_broker(redis_url)
    await broker.connect()
    try:
        yield broker
    finally:
        await broker.stop()
