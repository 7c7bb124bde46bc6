"""Wiring of the proxy (routes come with issue 5)."""

from __future__ import annotations

from fastapi import FastAPI

from shared.bus import make_broker
from shared.service import add_health_routes, make_context, service_lifespan
from shared.settings import Settings, load_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    ctx = make_context("proxy", settings)
    broker = make_broker(settings.redis_url, ctx.registry, "proxy")

    async def start() -> None:
        await broker.connect()

    async def stop() -> None:
        await broker.stop()

    app = FastAPI(title="gamma-proxy", lifespan=service_lifespan(ctx, start, stop))
    add_health_routes(app, ctx, require_all=True)
    return app
