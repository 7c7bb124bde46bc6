"""Wiring of the compaction service: one consumer group on `gamma:compaction:requests`."""

from __future__ import annotations

from fastapi import FastAPI

from services.compaction.handler import CompactionHandler, Metrics
from services.compaction.summarizer import Summarizer
from shared.redis import keys
from shared.serving.model import model_client
from shared.serving.service import add_health_routes, make_context, service_lifespan
from shared.settings import Settings, load_settings
from shared.streams.bus import consumer_name, make_broker, start_subscriptions, subscribe_service
from shared.telemetry.tracing import app_telemetry


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    ctx = make_context("compaction", settings)
    broker = make_broker(settings.bus.redis_url, ctx.registry, "compaction")
    consumer = consumer_name("compaction")
    client = model_client(settings, "summarizer")
    summarizer = Summarizer(client, settings.models.model, settings.models.default_model_api,
                            settings.compaction.compaction_summary_images, settings.models.catalogue)
    handler = CompactionHandler(
        redis=ctx.redis, data_dir=settings.storage.data_dir, summarizer=summarizer,
        consumer=consumer, hold_interval_s=max(0.2, settings.bus.claim_idle_ms / 3000),
        lock_ms=max(10_000, 4 * settings.bus.claim_idle_ms), metrics=Metrics(ctx.registry),
    )

    subs = subscribe_service(broker, ctx.redis, "compaction", {keys.COMPACTION_REQUESTS: handler},
                             claim_idle_ms=settings.bus.claim_idle_ms, max_deliveries=settings.bus.max_deliveries)

    async def start() -> None:
        await start_subscriptions(ctx.redis, broker, subs)

    async def stop() -> None:
        await broker.stop()
        await client.close()

    app = FastAPI(title="gamma-compaction", lifespan=service_lifespan(ctx, start, stop), telemetry=app_telemetry())
    app.state.broker = broker  # its subscriptions: subscriptions_of(app.state.broker) (tools/docs.py)
    add_health_routes(app, ctx)
    return app
