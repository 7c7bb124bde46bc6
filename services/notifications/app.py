"""Wiring of the notification service: POST /notifications, plus groups on the notifications stream,
lifecycle and recorded injections."""

from __future__ import annotations

from fastapi import FastAPI

from shared import keys
from shared.bus import consumer_name, ensure_group, make_broker, subscribe
from shared.contracts.lifecycle import LIFECYCLE_ADAPTER, LifecycleEvent
from shared.contracts.notifications import NotificationSubmit
from shared.contracts.recorded import InjectionRecorded
from shared.service import add_health_routes, make_context, service_lifespan
from shared.settings import Settings, load_settings

GROUP = "notifications"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    ctx = make_context("notifications", settings)
    broker = make_broker(settings.redis_url, ctx.registry, "notifications")
    consumer = consumer_name("notifications")

    async def on_submit(body: NotificationSubmit) -> None:
        raise NotImplementedError("issue 6")

    async def on_lifecycle(event: LifecycleEvent) -> None:
        raise NotImplementedError("issue 6")

    async def on_recorded(event: InjectionRecorded) -> None:
        raise NotImplementedError("issue 6")

    subs = [
        subscribe(broker, ctx.redis, stream=keys.NOTIFICATIONS, group=GROUP, consumer=consumer,
                  model=NotificationSubmit, handler=on_submit, claim_idle_ms=settings.claim_idle_ms),
        subscribe(broker, ctx.redis, stream=keys.LIFECYCLE, group=GROUP, consumer=consumer,
                  model=LIFECYCLE_ADAPTER, handler=on_lifecycle, claim_idle_ms=settings.claim_idle_ms),
        subscribe(broker, ctx.redis, stream=keys.INJECTIONS_RECORDED, group=GROUP, consumer=consumer,
                  model=InjectionRecorded, handler=on_recorded, claim_idle_ms=settings.claim_idle_ms),
    ]

    async def start() -> None:
        for sub in subs:
            await ensure_group(ctx.redis, sub.stream, sub.group)
        await broker.start()

    async def stop() -> None:
        await broker.stop()

    app = FastAPI(title="gamma-notifications", lifespan=service_lifespan(ctx, start, stop))
    add_health_routes(app, ctx, require_all=True)
    return app
