"""The internal port of a public service (proxy, notifications): /metrics and the API docs.

The public ports take requests from anyone; /metrics (stream names, queue depths, per-type counts)
and the Swagger pages answered there without a token. They are served on a second, internal port
instead (GAMMA_PROXY_METRICS_PORT, GAMMA_NOTIFICATIONS_METRICS_PORT): not published by compose, not
behind the k8s Service, admitted by the NetworkPolicy only from Gamma pods and the monitoring
namespace, and scraped there (`prometheus.io/port`). The OpenAPI document stays public: it is
published in docs/ anyway and clients generate code from it. The internal server runs in the
service's own event loop, started and stopped by its lifespan; the public server owns the signals.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import uvicorn
from fastapi import FastAPI, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from shared.telemetry.tracing import app_telemetry


class _Refreshable(Protocol):
    async def refresh(self) -> None: ...


class Scraped(Protocol):
    """What a /metrics response needs of a ServiceContext."""

    name: str
    registry: CollectorRegistry

    @property
    def stream_stats(self) -> Any: ...  # _Refreshable | None


async def metrics_response(ctx: Scraped) -> Response:
    stats: _Refreshable | None = ctx.stream_stats
    if stats is not None:
        await stats.refresh()
    return Response(generate_latest(ctx.registry), media_type=CONTENT_TYPE_LATEST)


def internal_app(ctx: Scraped, public: FastAPI) -> FastAPI:
    app = FastAPI(title=f"gamma-{ctx.name} (internal)", docs_url=None, redoc_url=None, openapi_url=None,
                  telemetry=app_telemetry())

    @app.get("/metrics")
    async def metrics() -> Response:
        return await metrics_response(ctx)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": ctx.name}

    @app.get("/openapi.json")
    async def openapi() -> JSONResponse:
        return JSONResponse(public.openapi())

    @app.get("/docs")
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{public.title} - docs")

    return app


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # SIGTERM belongs to the public server, whose lifespan stops this one


class InternalServer:
    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self._server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                              log_config=None, lifespan="off"))
        self._task: asyncio.Task[None] | None = None
        self.port = port

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._server.serve())
        while not self._server.started:
            if self._task.done():  # could not bind: uvicorn logged why and exited the task
                raise RuntimeError(f"the internal port {self.port} could not be served")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._task, 10)
        self._task = None
