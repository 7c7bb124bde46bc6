"""Wiring of the example connector: register at start (retried until the notifications service
answers), then answer calls. `/healthz`, `/readyz` (registered and reading) and `/metrics`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import redis.asyncio as aioredis
import structlog
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from services.connectors.example.library import BrandLibrary, spec
from services.connectors.example.worker import CallWorker
from shared.contracts.records.connectors import ConnectorResultSubmit
from shared.settings import Settings, load_settings

log = structlog.get_logger()
NAME = "brand"
ASSETS = Path(__file__).resolve().parent / "assets"
RETRIES = 8


class Notifications:
    """The connector's HTTP client: its service token, and retries while the service restarts."""

    def __init__(self, base_url: str, token: str) -> None:
        self.http = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10)

    async def _send(self, method: str, path: str, body: str) -> httpx.Response | None:
        delay = 0.2
        for _ in range(RETRIES):
            try:
                resp = await self.http.request(method, path, content=body, headers={"Content-Type": "application/json"})
                if resp.status_code < 500:
                    return resp
            except httpx.HTTPError as exc:
                log.warning("connector_http_retry", path=path, error=str(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 3.0)
        return None

    async def register(self) -> None:
        while (resp := await self._send("PUT", f"/connectors/{NAME}", spec().model_dump_json())) is None \
                or resp.status_code != 200:
            log.warning("connector_register_failed", status=None if resp is None else resp.status_code)
            await asyncio.sleep(1.0)
        log.info("connector_registered", connector=NAME, version=resp.json()["version"])

    async def answer(self, body: ConnectorResultSubmit) -> None:
        resp = await self._send("POST", f"/connectors/{NAME}/results", body.model_dump_json())
        if resp is None or resp.status_code >= 300:
            log.warning("connector_answer_refused", call_id=body.call_id,
                        status=None if resp is None else resp.status_code, body=None if resp is None else resp.text[:300])


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    registry = CollectorRegistry()
    client = aioredis.Redis.from_url(settings.bus.redis_url)
    base = settings.notifications.notifications_url or f"http://127.0.0.1:{settings.server.notifications_port}"
    notifications = Notifications(base, settings.auth.service_token)
    library = BrandLibrary(Path(settings.notifications.brand_dir) if settings.notifications.brand_dir else ASSETS)
    consumer = settings.bus.instance or f"{NAME}-1"  # stable: a restart finds its own pending calls
    worker = CallWorker(client, NAME, library, notifications.answer, consumer, settings.bus.claim_idle_ms, registry)
    state = {"ready": False}

    async def start() -> None:
        await worker.ensure_group()
        await notifications.register()
        state["ready"] = True
        await worker.run_forever()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.ensure_future(start())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await notifications.http.aclose()
            await client.aclose()

    app = FastAPI(title="gamma-connector-brand", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": f"connector-{NAME}"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        return Response(status_code=200 if state["ready"] else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app
