"""Wiring of the notification service: POST /notifications, plus groups on the notifications stream,
lifecycle and recorded injections."""

from __future__ import annotations

import httpx
import structlog
from fastapi import FastAPI

from services.notifications.connectors import ConnectorMetrics, make_connector_router
from services.notifications.delivery import Delivery, Metrics, NotificationConflict, UnknownSession
from services.notifications.http import make_router
from services.notifications.mcp_routes import make_mcp_router
from services.notifications.migrate import migrate_legacy_keys
from services.notifications.policy import UrgencyPolicy, never_wake, wake_for_types
from shared.contracts.streams.lifecycle import LifecycleEvent, SessionLive
from shared.contracts.streams.notifications import ExternalNotification, NotificationSubmit
from shared.contracts.streams.recorded import InjectionRecorded
from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.redis.redis_errors import install_redis_error_handlers
from shared.serving.jsonlimits import JsonBodyGuard
from shared.serving.service import add_health_routes, make_context, service_lifespan
from shared.settings import Settings, load_settings
from shared.streams.bus import (
    Handler,
    by_session,
    make_broker,
    publish,
    start_subscriptions,
    subscribe_service,
)
from shared.telemetry.tracing import app_telemetry
from shared.trust.oidc import build_verifier

log = structlog.get_logger()


def intake(delivery: Delivery) -> Handler:
    """The `gamma:notifications` handler: a notification that can never be delivered is acked and
    dropped (a retry cannot make its session exist, nor change the first notification under its id);
    the producer reads the log."""

    async def on_submit(body: NotificationSubmit) -> None:
        try:
            accepted = await delivery.submit(body)
        except (UnknownSession, NotificationConflict) as exc:
            event = "notification_unknown_session" if isinstance(exc, UnknownSession) else "notification_id_conflict"
            log.warning(event, session_id=body.session_id, notification_id=body.notification.id)
            return
        log.info("notification_stream", session_id=body.session_id, notification_id=accepted.id,
                 duplicate=accepted.duplicate, status=accepted.status)

    return on_submit


def create_app(settings: Settings | None = None, urgency: UrgencyPolicy | None = None) -> FastAPI:
    settings = settings or load_settings()
    if urgency is None:  # configured: GAMMA_URGENT_NOTIFICATION_TYPES (shared/settings/notifications.py)
        urgency = wake_for_types(*settings.notifications.urgent_types) if settings.notifications.urgent_types else never_wake
    ctx = make_context("notifications", settings)
    broker = make_broker(settings.bus.redis_url, ctx.registry, "notifications")

    async def send_wake(sid: str, notification: ExternalNotification) -> None:
        await publish(broker, keys.WAKE, Wake(session_id=sid, reason="notification"))
        log.info("notification_wake", session_id=sid, notification_id=notification.id)

    delivery = Delivery(ctx.redis, metrics=Metrics(ctx.registry), urgency=urgency, send_wake=send_wake)

    async def on_lifecycle(event: LifecycleEvent) -> None:
        if isinstance(event, SessionLive):
            await delivery.on_live(event)

    async def on_recorded(event: InjectionRecorded) -> None:
        await delivery.on_recorded(event)

    handlers: dict[str, Handler] = {
        keys.NOTIFICATIONS: intake(delivery), keys.LIFECYCLE: on_lifecycle, keys.INJECTIONS_RECORDED: on_recorded,
    }
    # One lane per session (shared/streams/bus_subscriber.py): a SessionLive waits up to 2 s for the digest to
    # settle before its Barrier (delivery.py), and handled one after another 200 wakes queued there,
    # holding every woken prompt (bench-e2e: waking prompt -> answer p50 2.4 s, wake -> live 56 ms).
    subs = subscribe_service(broker, ctx.redis, "notifications", handlers, claim_idle_ms=settings.bus.claim_idle_ms,
                             max_deliveries=settings.bus.max_deliveries, order_key=by_session)

    async def start() -> None:
        await migrate_legacy_keys(ctx.redis)  # before any intake reads or writes a notification key
        await start_subscriptions(ctx.redis, broker, subs)

    async def stop() -> None:
        await broker.stop()
        if verifier is not None:
            await verifier.aclose()  # a JWKS refresh under way, before its client closes
        await jwks_client.aclose()

    jwks_client = httpx.AsyncClient(follow_redirects=False)
    verifier = build_verifier(settings.auth.oidc(), jwks_client)
    app = FastAPI(title="gamma-notifications", lifespan=service_lifespan(ctx, start, stop), docs_url=None, redoc_url=None,
                  telemetry=app_telemetry())
    app.state.broker = broker  # its subscriptions: subscriptions_of(app.state.broker) (tools/docs.py)
    add_health_routes(app, ctx, require_all=True, internal_port=settings.server.notifications_metrics_port)
    install_redis_error_handlers(app)
    app.include_router(make_router(delivery, settings.auth.service_token, settings.limits.max_body_bytes, verifier))
    connector_metrics = ConnectorMetrics(ctx.registry)
    app.include_router(make_connector_router(ctx.redis, delivery, settings.auth.service_token, settings.notifications.max_connectors,
                                             verifier, connector_metrics))
    app.include_router(make_mcp_router(ctx.redis, settings.notifications, settings.auth.service_token, verifier,
                                       connector_metrics))
    app.add_middleware(JsonBodyGuard, max_depth=settings.limits.max_json_depth, max_bytes=settings.limits.max_body_bytes,
                       max_number_digits=settings.limits.max_json_number_digits)
    return app
