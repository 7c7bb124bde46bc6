"""Wiring of the runtime: the `gamma:runtime:wake` group and the worker that holds session leases."""

from __future__ import annotations

from fastapi import FastAPI

from shared import keys
from shared.bus import consumer_name, ensure_group, make_broker, subscribe
from shared.contracts.wake import Wake
from shared.service import add_health_routes, make_context, service_lifespan
from shared.settings import Settings, load_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    ctx = make_context("runtime", settings)
    broker = make_broker(settings.redis_url, ctx.registry, "runtime")

    async def on_wake(wake: Wake) -> None:
        raise NotImplementedError("issue 4")

    subscribe(broker, ctx.redis, stream=keys.WAKE, group=keys.RUNTIME_GROUP, consumer=consumer_name("runtime"),
              model=Wake, handler=on_wake, claim_idle_ms=settings.claim_idle_ms)

    async def start() -> None:
        await ensure_group(ctx.redis, keys.WAKE, keys.RUNTIME_GROUP)
        await broker.start()

    async def stop() -> None:
        await broker.stop()

    app = FastAPI(title="gamma-runtime", lifespan=service_lifespan(ctx, start, stop))
    add_health_routes(app, ctx)
    return app
