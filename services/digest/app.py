"""Wiring of the digest service: groups on artifact changes, lifecycle and recorded injections, plus
the debounce loop."""

from __future__ import annotations

from fastapi import FastAPI

from services.digest.builder import DigestBuilder, Metrics
from services.digest.flush import Flusher
from shared.contracts.streams.artifacts import ArtifactChange
from shared.contracts.streams.causal import FlushRequest
from shared.contracts.streams.lifecycle import LifecycleEvent, SessionLive
from shared.contracts.streams.recorded import InjectionRecorded
from shared.redis import keys
from shared.serving.service import add_health_routes, make_context, service_lifespan, watch_disk
from shared.settings import Settings, load_settings
from shared.streams.bus import Handler, by_session, make_broker, start_subscriptions, subscribe_service
from shared.streams.watchdog import StallWatchdog
from shared.telemetry.tracing import app_telemetry


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    ctx = make_context("digest", settings)
    watch_disk(ctx)  # /readyz and the gauges report the session disk (shared/serving/diskhealth.py)
    broker = make_broker(settings.bus.redis_url, ctx.registry, "digest")
    builder = DigestBuilder(ctx.redis, settings.storage.data_dir, debounce_ms=settings.bus.digest_debounce_ms,
                            metrics=Metrics(ctx.registry), blob_orphan_s=settings.storage.blob_orphan_s)
    flusher = Flusher(builder)  # causal order: a waiting prompt's changes go out now (shared/streams/causal.py)

    async def on_change(change: ArtifactChange) -> None:
        await builder.on_change(change)

    async def on_lifecycle(event: LifecycleEvent) -> None:
        if isinstance(event, SessionLive):
            await builder.on_live(event)
        else:
            await builder.on_dormant(event)

    async def on_recorded(event: InjectionRecorded) -> None:
        await builder.on_recorded(event)

    async def on_flush(request: FlushRequest) -> None:
        await flusher.on_request(request)

    handlers: dict[str, Handler] = {
        keys.ARTIFACT_CHANGES: on_change, keys.LIFECYCLE: on_lifecycle, keys.INJECTIONS_RECORDED: on_recorded,
        keys.DIGEST_FLUSH: on_flush,
    }
    # Sessions concurrently, each in order: per-session state is guarded by the session's Redis lock.
    subs = subscribe_service(broker, ctx.redis, "digest", handlers, claim_idle_ms=settings.bus.claim_idle_ms,
                             max_deliveries=settings.bus.max_deliveries, order_key=by_session)

    async def start() -> None:
        await start_subscriptions(ctx.redis, broker, subs)
        ctx.spawn(builder.run_due(), "digest-due")
        # A dead subscriber or a handler that never returns must not leave a 200 /readyz (fault suite).
        ctx.watchdog = StallWatchdog(ctx.redis, stall_s=settings.bus.consumer_stall_s)
        ctx.spawn(ctx.watchdog.run(), "stall-watchdog")

    async def stop() -> None:
        await broker.stop()

    app = FastAPI(title="gamma-digest", lifespan=service_lifespan(ctx, start, stop), telemetry=app_telemetry())
    app.state.broker = broker  # its subscriptions: subscriptions_of(app.state.broker) (tools/docs.py)
    add_health_routes(app, ctx)
    return app
