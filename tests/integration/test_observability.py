"""Observability against a real Redis: one trace across streams, and the metrics each service exports."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI
from opentelemetry import trace
from prometheus_client.parser import text_string_to_metric_families

from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.serving.service import add_health_routes, configure_tracing, make_context
from shared.settings import Settings
from shared.streams.bus import ensure_group, make_broker, publish, subscribe
from shared.telemetry import metrics
from tests.support.polling import eventually


def current_trace_id() -> int:
    return trace.get_current_span().get_span_context().trace_id


async def test_publish_consume_publish_consume_is_one_trace(redis_url: str, redis_client: aioredis.Redis) -> None:
    """A message published inside a span is handled in that trace, and what the handler publishes
    onward is handled in it too: the W3C traceparent rides in FastStream's envelope headers."""
    configure_tracing("test")
    first, second = f"gamma:test:{uuid.uuid4().hex[:8]}", f"gamma:test:{uuid.uuid4().hex[:8]}"
    seen: dict[str, int] = {}
    broker = make_broker(redis_url)

    async def on_first(wake: Wake) -> None:
        seen["first"] = current_trace_id()
        await publish(broker, second, Wake(session_id=wake.session_id, reason="resume"))

    async def on_second(wake: Wake) -> None:
        seen["second"] = current_trace_id()

    subscribe(broker, redis_client, stream=first, group="g", consumer="c", model=Wake, handler=on_first)
    subscribe(broker, redis_client, stream=second, group="g", consumer="c", model=Wake, handler=on_second)
    await ensure_group(redis_client, first, "g")
    await ensure_group(redis_client, second, "g")
    await broker.start()
    try:
        with trace.get_tracer("test").start_as_current_span("prompt") as root:
            origin = root.get_span_context().trace_id
            await publish(broker, first, Wake(session_id="s1"))
        async def both_handled() -> bool:
            return "second" in seen

        await eventually(both_handled, timeout=15, what="the onward message handled")
    finally:
        await broker.stop()
    assert origin != 0
    assert seen == {"first": origin, "second": origin}
    # The context is in the stored entry itself, so any consumer (another process) continues it.
    (_, fields), = await redis_client.xrange(first)
    envelope = b"".join(v for v in fields.values() if isinstance(v, bytes))
    assert f"{origin:032x}".encode() in envelope and b"traceparent" in envelope


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


async def get_metrics(app: FastAPI) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as client:
        resp = await client.get("/metrics")
    assert resp.status_code == 200
    return scrape(resp.text)


async def test_group_lag_pending_and_dead_letters_are_read_at_scrape_time(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ctx = make_context("digest", Settings(REDIS_URL=redis_url))
    app = FastAPI()
    add_health_routes(app, ctx)
    try:
        await ensure_group(redis_client, keys.ARTIFACT_CHANGES, "digest")
        for i in range(5):
            await redis_client.xadd(keys.ARTIFACT_CHANGES, {"data": f'{{"n": {i}}}'})
        await redis_client.xreadgroup("digest", "c1", {keys.ARTIFACT_CHANGES: ">"}, count=2)
        await redis_client.xadd(keys.DEADLETTER, {"data": "{}"})
        labels = (("group", "digest"), ("stream", keys.ARTIFACT_CHANGES))
        values = await get_metrics(app)
        assert values[("gamma_stream_group_lag", labels)] == 3
        assert values[("gamma_stream_group_pending", labels)] == 2
        assert values[("gamma_stream_group_consumers", labels)] == 1
        assert values[("gamma_deadletter_entries", ())] == 1
        # Acknowledging moves the numbers at the next scrape, with nothing else refreshing them.
        entries = await redis_client.xrange(keys.ARTIFACT_CHANGES, count=2)
        await redis_client.xack(keys.ARTIFACT_CHANGES, "digest", *[e[0] for e in entries])
        values = await get_metrics(app)
        assert values[("gamma_stream_group_pending", labels)] == 0
        # A group of another service on a stream this one reads is not this service's lag.
        assert not any(k[0] == "gamma_stream_group_lag" and ("group", "notifications") in k[1] for k in values)
    finally:
        await ctx.redis.aclose()


async def test_event_metrics_recorded_through_the_helpers(redis_url: str) -> None:
    ctx = make_context("runtime", Settings(REDIS_URL=redis_url))
    app = FastAPI()
    add_health_routes(app, ctx)
    leases = {"s1": 1, "s2": 2}
    try:
        before = await get_metrics(app)
        # Registered from the start, so dashboards see zeros rather than gaps.
        assert before[("gamma_active_leases", ())] == 0
        metrics.injection_delivered(ctx.registry, "artifact_update", "artifact")
        metrics.injection_delivered(ctx.registry, "artifact_update", "artifact")
        metrics.injection_delivered(ctx.registry, "system_update", "notification")
        metrics.model_request(ctx.registry, prompt_tokens=5000, shared_prefix_tokens=4096, completion_tokens=40, model="m")
        metrics.track_active_leases(ctx.registry, lambda: len(leases))
        assert metrics.observe_wake(ctx.registry, wake_published_ms=1_000, now_ms=1_250) == 0.25
        metrics.dead_lettered(ctx.registry)
        values = await get_metrics(app)
    finally:
        await ctx.redis.aclose()
    assert values[("gamma_injections_delivered_total", (("kind", "artifact_update"), ("source", "artifact")))] == 2
    assert values[("gamma_injections_delivered_total", (("kind", "system_update"), ("source", "notification")))] == 1
    assert values[("gamma_model_prompt_tokens_total", (("model", "m"),))] == 5000
    assert values[("gamma_model_shared_prefix_tokens_total", (("model", "m"),))] == 4096
    assert values[("gamma_model_completion_tokens_total", (("model", "m"),))] == 40
    assert values[("gamma_model_request_shared_prefix_tokens_sum", ())] == 4096
    assert values[("gamma_active_leases", ())] == 2
    assert values[("gamma_wake_latency_seconds_count", ())] == 1
    assert values[("gamma_wake_latency_seconds_sum", ())] == 0.25
    assert values[("gamma_deadletter_total", ())] == 1
    assert metrics.deadletter_counter(ctx.registry) is metrics.for_registry(ctx.registry).deadletters


@pytest.mark.parametrize(("entry", "expected"), [("1733150000123-4", 1733150000123), (b"17-0", 17), ("bad", None)])
def test_entry_ms(entry: Any, expected: int | None) -> None:
    assert metrics.entry_ms(entry) == expected


async def test_entry_ms_of_the_entry_being_handled() -> None:
    import structlog

    with structlog.contextvars.bound_contextvars(entry_id="1733150000999-0"):
        assert metrics.entry_ms() == 1733150000999
    await asyncio.sleep(0)


async def test_bus_reports_delivery_time_and_dead_letters(redis_url: str, redis_client: aioredis.Redis) -> None:
    """A broker made with a registry: `subscribe` times each handled entry and counts dead letters
    without the service passing anything more."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    stream = f"gamma:test:{uuid.uuid4().hex[:8]}"
    handled: list[str] = []
    broker = make_broker(redis_url, registry, "test")

    async def on_wake(wake: Wake) -> None:
        handled.append(wake.session_id)

    subscribe(broker, redis_client, stream=stream, group="g", consumer="c", model=Wake, handler=on_wake)
    await ensure_group(redis_client, stream, "g")
    await broker.start()
    try:
        await publish(broker, stream, Wake(session_id="s1"))
        await redis_client.xadd(stream, {"data": '{"not": "a wake"}'})

        async def both_seen() -> bool:
            return bool(handled) and await redis_client.xlen(keys.DEADLETTER) == 1

        await eventually(both_seen, timeout=15, what="one handled entry and one dead letter")
    finally:
        await broker.stop()
    values = scrape(generate_latest(registry).decode())
    labels = (("group", "g"), ("stream", stream))
    assert values[("gamma_stream_delivery_seconds_count", labels)] == 1
    assert 0 <= values[("gamma_stream_delivery_seconds_sum", labels)] < 15
    assert values[("gamma_deadletter_total", ())] == 1


def test_wake_latency_is_the_wake_streams_delivery_time() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics.observe_handled(registry, keys.WAKE, "runtime", "1000-0", now_ms=1_400)
    metrics.observe_handled(registry, keys.LIFECYCLE, "digest", "1000-0", now_ms=1_900)
    m = metrics.for_registry(registry)
    assert m.wake_latency._sum.get() == 0.4
    assert m.stream_delivery.labels(stream=keys.LIFECYCLE, group="digest")._sum.get() == 0.9
    metrics.observe_handled(None, keys.WAKE, "runtime", "1000-0")  # no registry: nothing to do, no error


async def test_runtime_counts_its_leases_at_scrape_time(redis_url: str, redis_client: aioredis.Redis) -> None:
    from shared.streams.bus import consumer_name

    ctx = make_context("runtime", Settings(REDIS_URL=redis_url))
    app = FastAPI()
    add_health_routes(app, ctx)
    try:
        await redis_client.set(keys.lease("s-mine-1"), consumer_name("runtime") + ":3")
        await redis_client.set(keys.lease("s-mine-2"), consumer_name("runtime") + ":1")
        await redis_client.set(keys.lease("s-other"), "runtime-elsewhere-1:7")
        assert (await get_metrics(app))[("gamma_active_leases", ())] == 2
        # Once the runtime reports its own count, that is what the gauge shows.
        metrics.track_active_leases(ctx.registry, lambda: 5)
        assert (await get_metrics(app))[("gamma_active_leases", ())] == 5
    finally:
        await ctx.redis.aclose()
