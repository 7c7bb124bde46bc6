"""Wiring of the proxy: dependencies on app.state, routers, JSON errors, body caps, the inspector page."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from services.proxy.deps import Proxy
from services.proxy.dormant.erase import sweep_forever
from services.proxy.edge.errors import install_error_handlers
from services.proxy.edge.heap import TrimAfterLargeResponses
from services.proxy.edge.limits import BodyLimit
from services.proxy.edge.metrics import ProxyMetrics
from services.proxy.edge.sse_response import ProxyApp
from services.proxy.fanout import EventFanout
from services.proxy.idempotency import IdempotencyRecorder, Replay, replay_response
from services.proxy.routes import (
    agui,
    branches,
    documents,
    events,
    images,
    knowledge,
    lifecycle,
    runs,
    sessions,
    spend,
    ui,
    workspace,
)
from shared.redis.reconnect import connect_blocking
from shared.redis.redis_errors import install_redis_error_handlers
from shared.serving.jsonlimits import JsonBodyGuard
from shared.serving.service import add_health_routes, make_context, service_lifespan, watch_disk
from shared.settings import Settings, load_settings
from shared.streams.bus import make_broker
from shared.telemetry.tracing import app_telemetry
from shared.trust.oidc import build_verifier

STATIC = Path(__file__).parent / "static"
# Bodies here are file contents (opaque bytes, routes/workspace.py): no JSON body limits.
WORKSPACE_FILES = r"^/sessions/[^/]+/workspace/files/"
# Many small writes for hours: no byte count per event (its frames are not a large response).
EVENT_STREAM = r"^/sessions/[^/]+/(events|ag-ui)$"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    ctx = make_context("proxy", settings)
    watch_disk(ctx)  # /readyz and the gauges report the session disk (shared/serving/diskhealth.py)
    broker = make_broker(settings.bus.redis_url, ctx.registry, "proxy")

    # Blocking commands (the forwarded writes' BLPOP, the SSE fan-out's XREAD BLOCK) on a client of
    # their own whose read timeout outlasts the longest block (shared/redis/reconnect.py).
    blocking = connect_blocking(settings.bus.redis_url, max(settings.sessions.reply_timeout_s, settings.sessions.sse_heartbeat_s))
    fanout = EventFanout(blocking, ctx.redis, block_ms=int(settings.sessions.sse_heartbeat_s * 1000),
                         queue_size=settings.limits.sse_queue_size, heartbeat_s=settings.sessions.sse_heartbeat_s)
    jwks_client = httpx.AsyncClient(follow_redirects=False)
    verifier = build_verifier(settings.auth.oidc(), jwks_client)

    async def start() -> None:
        # Publish-only (Wake, ArtifactChange): connect, no subscribers to start.
        await broker.connect()
        # Deletes a killed proxy left half done are finished (services/proxy/dormant/erase.py).
        ctx.spawn(sweep_forever(app.state.proxy), "delete-sweep")

    async def stop() -> None:
        await fanout.close()
        await broker.stop()
        await blocking.aclose()
        if verifier is not None:
            await verifier.aclose()  # a JWKS refresh under way, before its client closes
        await jwks_client.aclose()

    app = ProxyApp(  # the server's send in each request's scope: the SSE body frames' (sse_response.py)
        title="gamma-proxy",
        version="1.0",
        description="Gamma harness data-plane proxy: sessions, messages and wake, SessionUIState sync, "
        "workspace files, Gamma documents, events (SSE), dormant preview.",
        lifespan=service_lifespan(ctx, start, stop),
        docs_url=None, redoc_url=None,  # on the internal port (shared/serving/internal_http.py)
        telemetry=app_telemetry(),  # the request span (shared/telemetry/tracing.py)
    )
    app.state.proxy = Proxy(settings=settings, redis=ctx.redis, broker=broker, tokens=settings.auth.tokens(),
                            verifier=verifier,
                            metrics=ProxyMetrics.create(ctx.registry), blocking=blocking, fanout=fanout)
    add_health_routes(app, ctx, require_all=True, internal_port=settings.server.proxy_metrics_port)
    install_error_handlers(app)
    install_redis_error_handlers(app)

    @app.exception_handler(Replay)
    async def _replay(_: object, exc: Replay) -> Response:
        return replay_response(exc.record)

    _mount(app, settings)
    return app


def _mount(app: FastAPI, settings: Settings) -> None:
    """The request guards (outermost last) and the routes."""
    # Innermost: it sees the response the route answered (error handlers included), before the trim.
    app.add_middleware(IdempotencyRecorder)
    # Inside BodyLimit (added later = outer): file contents are opaque bytes, not JSON.
    app.add_middleware(JsonBodyGuard, max_depth=settings.limits.max_json_depth, max_bytes=settings.limits.max_body_bytes,
                       max_number_digits=settings.limits.max_json_number_digits, exempt=[WORKSPACE_FILES])
    app.add_middleware(BodyLimit, max_bytes=settings.limits.max_body_bytes)
    app.add_middleware(TrimAfterLargeResponses, passthrough=EVENT_STREAM)
    for module in (sessions, runs, lifecycle, ui, workspace, images, documents, events, knowledge, branches, agui, spend):
        app.include_router(module.router)

    @app.get("/", include_in_schema=False)
    async def inspector() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
