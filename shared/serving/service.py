"""What every service has: a Redis client, a metrics registry, /healthz /readyz /metrics, a heartbeat.

Readiness: a service is ready once Redis answers and its consumer groups exist; it then refreshes
`gamma:health:{service}` every second. The proxy and notifications are ready only when all five are.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import structlog
import uvicorn
from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry

from shared.pools.iopool import install_io_executor
from shared.redis import keys, redis_cluster, topology
from shared.redis.reconnect import connect
from shared.serving import cancel_safe
from shared.serving.diskhealth import DiskHealth
from shared.serving.gcpolicy import heap_freezer, young_threshold
from shared.serving.heapcensus import census_loop
from shared.serving.httplimits import bounded_http_protocol
from shared.serving.internal_http import InternalServer, internal_app, metrics_response
from shared.settings import Settings, load_settings
from shared.streams.bus import ensured_groups, missing_groups
from shared.streams.trim import trim_loop
from shared.streams.watchdog import StallWatchdog
from shared.telemetry.metrics import StreamStats, for_registry, install_stream_stats
from shared.telemetry.tracing import configure_tracing, edge_app

HEARTBEAT_TTL_MS = 5_000
CLOSE_WAIT_S = 5.0
READY_PROBE_S = 2.0  # /readyz: Redis must answer a PING within this long


@dataclass
class ServiceContext:
    name: str
    settings: Settings
    redis: aioredis.Redis
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    ready: bool = False
    started_at: float = field(default_factory=time.time)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # Group lag/pending and dead letters, read from Redis when /metrics is scraped (shared/telemetry/metrics.py).
    stream_stats: StreamStats | None = None
    # Set by a service that runs a consumer stall watchdog (shared/streams/watchdog.py): stalled -> not ready.
    watchdog: StallWatchdog | None = None
    # A public service's /metrics and docs, on its internal port (shared/serving/internal_http.py).
    internal: InternalServer | None = None
    # Shown under "details" by /readyz (the runtime: which sandbox layer confines agent commands).
    details: dict[str, Any] = field(default_factory=dict)
    # The session disk's health, for the services that use it (watch_disk): /readyz, gauges.
    disk: DiskHealth | None = None

    def spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self.tasks.append(task)
        return task

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        if self.tasks:
            # Bounded: shutdown must never hang on a background loop, even one whose cancel was lost
            # (shared/serving/cancel_safe.py closes the one known way: Python 3.11's wait_for).
            _, stuck = await asyncio.wait(self.tasks, timeout=CLOSE_WAIT_S)
            for task in stuck:
                task.cancel()
                structlog.get_logger().warning("background_task_outlived_shutdown", task=task.get_name())
        self.tasks.clear()
        with contextlib.suppress(Exception):
            await self.redis.delete(keys.health(self.name))
        await self.redis.aclose()


def make_context(name: str, settings: Settings) -> ServiceContext:
    client = connect(settings.bus.redis_url)
    ctx = ServiceContext(name=name, settings=settings, redis=client)
    configure_tracing(name)
    for_registry(ctx.registry)  # every Gamma metric family is exported from the first scrape on
    ctx.stream_stats = install_stream_stats(ctx.registry, client, name)
    return ctx


def watch_disk(ctx: ServiceContext) -> DiskHealth:
    """Probe the session disk while the service runs (shared/serving/diskhealth.py)."""
    ctx.disk = DiskHealth(ctx.settings.storage.data_dir, ctx.name, ctx.registry, interval_s=ctx.settings.storage.disk_probe_s,
                          timeout_s=ctx.settings.storage.disk_probe_timeout_s,
                          min_free_bytes=ctx.settings.storage.disk_min_free_bytes)
    return ctx.disk


async def heartbeat(ctx: ServiceContext) -> None:
    while True:
        # No beat while a consumer group is gone: its subscriber has stopped, so the gatekeepers
        # (proxy, notifications) stop being ready too.
        if ctx.ready and not await _groups_gone(ctx):
            with contextlib.suppress(Exception):
                await ctx.redis.set(keys.health(ctx.name), str(int(time.time() * 1000)), px=HEARTBEAT_TTL_MS)
        await asyncio.sleep(1.0)


async def _groups_gone(ctx: ServiceContext) -> list[str]:
    try:
        gone = await missing_groups(ctx.redis)
    except Exception:  # noqa: BLE001 - Redis trouble is reported by /readyz's ping
        return []
    if gone:
        structlog.get_logger().error("consumer_groups_missing", groups=gone,
                                     hint="the stream or group was deleted; restart the service")
    return gone


async def all_services_ready(client: aioredis.Redis) -> dict[str, bool]:
    values = await redis_cluster.mget(client, [keys.health(s) for s in topology.SERVICES])  # one slot each
    return {s: v is not None for s, v in zip(topology.SERVICES, values, strict=True)}


def add_health_routes(app: FastAPI, ctx: ServiceContext, *, require_all: bool = False,
                      internal_port: int | None = None) -> None:
    """With `internal_port` (the public services), /metrics is served there, not on `app`."""
    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": ctx.name}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        try:
            # Bounded: a probe on a stalled link answers "not ready" at once, not after the retries.
            async with asyncio.timeout(READY_PROBE_S):
                await ctx.redis.ping()
        except Exception as exc:  # noqa: BLE001 - any Redis failure means not ready
            return JSONResponse({"ready": False, "error": f"redis: {exc!r}"}, status_code=503)
        if not ctx.ready:
            return JSONResponse({"ready": False, "error": "starting"}, status_code=503)
        if ctx.watchdog is not None and ctx.watchdog.stalled:
            return JSONResponse({"ready": False, "error": "a consumer stopped taking entries; restarting",
                                 "groups": ctx.watchdog.stalled}, status_code=503)
        gone = await missing_groups(ctx.redis)
        if gone:
            return JSONResponse({"ready": False, "error": "consumer groups missing (deleted stream or lost "
                                 "Redis data); restart the service", "groups": gone}, status_code=503)
        if require_all:
            states = await all_services_ready(ctx.redis)
            if not all(states.values()):
                return JSONResponse({"ready": False, "services": states}, status_code=503)
            return JSONResponse({"ready": True, "services": states, **_details(ctx)})
        return JSONResponse({"ready": True, **_details(ctx)})

    if internal_port is not None:
        ctx.internal = InternalServer(internal_app(ctx, app), ctx.settings.server.host, internal_port)
        return

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return await metrics_response(ctx)


def _details(ctx: ServiceContext) -> dict[str, Any]:
    out: dict[str, Any] = {"details": ctx.details} if ctx.details else {}
    if ctx.disk is not None:
        # Degraded, still ready: reads and what lives in Redis go on, and every pod shares the disk.
        out["disk"] = ctx.disk.current.view()
        if not ctx.disk.ok:
            out["degraded"] = ["disk"]
    return out


Lifespan = Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]


async def wait_for_redis(ctx: ServiceContext, log_every_s: float = 5.0) -> None:
    """Redis may come up after the service (compose, a restarted pod): wait for it instead of crashing.
    Nothing is served meanwhile, so /readyz is not 200 until Redis answers and the groups exist."""
    log = structlog.get_logger()
    delay, waited, last_log = 0.1, 0.0, -log_every_s
    # uvicorn only acts on SIGTERM once startup is over: chain its handler and stop waiting at once.
    terminated: list[int] = []
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        terminated.append(signum)
        if callable(previous):
            previous(signum, frame)

    in_main = threading.current_thread() is threading.main_thread()  # a TestClient runs us in a thread
    if in_main:
        signal.signal(signal.SIGTERM, on_term)
    try:
        while not terminated:
            try:
                await ctx.redis.ping()
                redis_cluster.ensure_mode(ctx.redis, ctx.settings.bus.redis_url)
                return
            except (OSError, aioredis.ConnectionError, aioredis.TimeoutError) as exc:
                if waited - last_log >= log_every_s:
                    log.warning("waiting_for_redis", error=str(exc), waited_s=round(waited, 1))
                    last_log = waited
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, 1.0)
        raise RuntimeError("stopped while waiting for Redis")
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def service_lifespan(
    ctx: ServiceContext, start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
) -> Lifespan:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        log = structlog.get_logger()
        install_io_executor(ctx.settings.server.io_threads)  # before anything goes to a thread
        await wait_for_redis(ctx)
        ctx.spawn(heartbeat(ctx), "heartbeat")
        if ctx.disk is not None:
            await ctx.disk.check()  # the first state before anything is served
            ctx.spawn(ctx.disk.run_forever(), "disk-probe")
        await start()
        # Every stream this service consumes is trimmed to what all its groups acknowledged.
        ctx.spawn(trim_loop(ctx.redis, lambda: {stream for stream, _ in ensured_groups(ctx.redis)},
                            ctx.settings.bus.stream_trim_interval_s), "stream-trim")
        if ctx.internal is not None:
            await ctx.internal.start()
        settle_heap()
        young_threshold(ctx.settings.server.gc_gen0)
        ctx.spawn(heap_freezer(ctx.settings.server.gc_freeze_s, ctx.settings.server.gc_full_s,
                               ctx.settings.server.gc_full_growth, ctx.settings.server.gc_full_released,
                               ctx.settings.server.gc_full_defer_s, ctx.settings.server.gc_malloc_trim),
                  "heap-freezer")
        if ctx.settings.server.heap_census:
            ctx.spawn(census_loop(ctx.settings.server.heap_census, ctx.settings.server.heap_census_s), "heap-census")
        ctx.ready = True
        with contextlib.suppress(Exception):  # the first heartbeat now, not a loop tick later
            await ctx.redis.set(keys.health(ctx.name), str(int(time.time() * 1000)), px=HEARTBEAT_TTL_MS)
        log.info("service_ready", pid=os.getpid())
        try:
            yield
        finally:
            log.info("service_stopping")
            ctx.ready = False
            if ctx.internal is not None:
                await ctx.internal.stop()
            await stop()
            await ctx.close()
            log.info("service_stopped", uptime_s=round(time.time() - ctx.started_at, 1))

    return lifespan


def settle_heap() -> None:
    """Move what startup allocated (modules, classes, pydantic schemas, skills, prompts: ~170k objects
    in the runtime, all alive until exit) out of the cyclic collector's reach. A full collection
    scans every tracked object: with them, one stalled the runtime's event loop for 120-220 ms
    (every callback, an injection being recorded, waited); without them it scans what sessions add."""
    gc.collect()
    gc.freeze()


def serve(app: FastAPI, host: str, port: int, settings: Settings | None = None, *, public: bool = False) -> None:
    """uvicorn turns SIGTERM/SIGINT into a lifespan shutdown: in-flight work finishes or stays pending.
    `public` (proxy, notifications): clients' trace headers are dropped unless trusted (shared/telemetry/tracing.py)."""
    cancel_safe.install()  # before any loop starts: no background loop survives its cancel
    limits = settings or load_settings()
    served = edge_app(app, limits.server.trace_client_context) if public else app
    # log_config=None: uvicorn's loggers propagate to the root handler (JSON lines, service bound).
    # http: httptools with a cap on the request head (431), see shared/serving/httplimits.py.
    uvicorn.run(served, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=20,
                log_config=None, http=bounded_http_protocol(limits.server.max_header_bytes, limits.server.max_headers))
