"""Wiring of the runtime: the `gamma:runtime:wake` group and the worker that holds session leases."""

from __future__ import annotations

import asyncio

import structlog
from fastapi import FastAPI
from pydantic import BaseModel

from services.runtime.hosting.worker import Worker
from services.runtime.sandbox import describe, export_metric, select_sandbox
from services.runtime.skillset.paths import sandbox_skills_dir, skills_dir
from services.runtime.skillset.prompt import VARIANTS, build_system_prompt
from services.runtime.skillset.skills import load_skills
from shared.redis import topology
from shared.redis.reconnect import warm
from shared.serving.model import model_client
from shared.serving.service import add_health_routes, make_context, service_lifespan, watch_disk
from shared.settings import Settings, load_settings
from shared.streams.bus import by_session, consumer_name, ensure_group, make_broker, publish, subscribe
from shared.telemetry.tracing import app_telemetry

SHUTDOWN_S = 20.0


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    ctx = make_context("runtime", settings)
    broker = make_broker(settings.bus.redis_url, ctx.registry, "runtime")
    skills = load_skills(skills_dir(settings))  # every sandbox layer passes the directory to commands
    # Probe the sandbox layers now (logged; /readyz details; gamma_sandbox_layer): sessions reuse the choice.
    sandbox = select_sandbox(settings, sandbox_skills_dir())
    ctx.details["sandbox"] = describe(sandbox)
    export_metric(ctx.registry, sandbox)
    prompts: dict[str, str] = {v: build_system_prompt(v, skills) for v in VARIANTS}

    async def bus(stream: str, message: BaseModel) -> None:
        await publish(broker, stream, message)

    worker = Worker(settings, ctx.redis, model_client(settings, "agent"), skills, prompts, bus, consumer_name("runtime"),
                    registry=ctx.registry, disk=watch_disk(ctx))

    (wake,) = topology.consumptions("runtime")
    # Wakes handled side by side (one lane per session), up to `GAMMA_RUNTIME_WAKES_AT_ONCE` in flight in
    # a sliding window (shared/streams/bus_window.py): a wake mostly waits on Redis and the disk (~30 ms, 100 at
    # p90), and handled one at a time a burst of 200 first prompts queued for 3 s (bench-e2e: wake p99
    # 3.5 s); read in batches that waited for their slowest wake, a burst of 100 beside 100 streaming
    # sessions still queued for ~1 s (docs/capacity.md "Per wake"). A read takes few at a time (a
    # quarter of the window): a read takes every wake it returns, and a large one sent a whole burst to
    # one worker (13/6/5 sessions over three workers, bench-workers); the fair-share pause (share.py)
    # still runs before each read.
    at_once = settings.runtime.runtime_wakes_at_once
    per_read = min(settings.runtime.runtime_wakes_per_read or max(1, at_once // 4), at_once)
    subscribe(broker, ctx.redis, stream=wake.stream, group=wake.group, consumer=consumer_name("runtime"),
              model=wake.model, handler=worker.on_wake, claim_idle_ms=settings.bus.claim_idle_ms,
              window=at_once, batch_size=per_read, order_key=by_session, pause=worker.wake_pause)

    async def start() -> None:
        await ensure_group(ctx.redis, wake.stream, wake.group)
        await warm(ctx.redis, settings.runtime.redis_warm_connections)
        await broker.start()
        worker.start()

    async def stop() -> None:
        # SIGTERM: persist every session and release its lease before the broker goes away. Bounded:
        # a stuck close must not keep the pod alive (its sessions are then resumed as orphans).
        try:
            await asyncio.wait_for(worker.shutdown(), SHUTDOWN_S)
        except TimeoutError:
            structlog.get_logger().error("worker_shutdown_timeout", sessions=list(worker.sessions))
        await broker.stop()

    app = FastAPI(title="gamma-runtime", lifespan=service_lifespan(ctx, start, stop), telemetry=app_telemetry())
    app.state.broker = broker  # its subscriptions: subscriptions_of(app.state.broker) (tools/docs.py)
    add_health_routes(app, ctx)

    @app.get("/sessions", include_in_schema=False)
    async def sessions() -> dict[str, object]:
        return {"worker": worker.worker_id, "sessions": worker.snapshot()}

    return app
