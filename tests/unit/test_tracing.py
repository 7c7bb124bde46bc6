"""shared/telemetry/tracing.py's pure parts: when tracing is on, the trace ids on log lines, the public services'
drop of a client's trace headers, FastAPI's telemetry settings, and one SSE delivery span per run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from services.proxy.routes.events import Deliveries
from shared.telemetry.tracing import (
    DropClientTraceContext,
    add_trace_ids,
    app_telemetry,
    detached,
    edge_app,
    exporting,
)

PARENT = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


@pytest.fixture
def otlp_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


def test_tracing_is_on_only_with_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(var, raising=False)
    assert not exporting() and app_telemetry()["tracing"] is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:4318/v1/traces")
    assert exporting() and app_telemetry()["tracing"] is True
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not exporting()


def test_fastapi_telemetry_skips_probes_and_keeps_to_spans() -> None:
    telemetry = app_telemetry()
    exclude = telemetry["exclude"]
    assert exclude is not None
    assert all(exclude({"path": p}) for p in ("/healthz", "/readyz", "/metrics"))
    assert not exclude({"path": "/sessions/s1/messages"})
    assert (telemetry["metrics"], telemetry["logs"], telemetry["operation_spans"]) == (False, False, False)


def test_log_lines_name_the_current_span_only_inside_one() -> None:
    assert "trace_id" not in add_trace_ids(None, "info", {"event": "x"})
    with TracerProvider().get_tracer("t").start_as_current_span("s") as span:
        context = span.get_span_context()
        line = add_trace_ids(None, "info", {"event": "x"})
    assert line["trace_id"] == f"{context.trace_id:032x}" and line["span_id"] == f"{context.span_id:016x}"


async def test_a_clients_trace_headers_are_dropped_and_nothing_else() -> None:
    seen: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)

    headers = [(b"authorization", b"Bearer t"), (b"traceparent", PARENT.encode()), (b"tracestate", b"a=b"),
               (b"baggage", b"k=v"), (b"content-type", b"application/json")]
    await DropClientTraceContext(app)({"type": "http", "headers": headers}, None, None)
    assert seen[-1]["headers"] == [(b"authorization", b"Bearer t"), (b"content-type", b"application/json")]
    lifespan = {"type": "lifespan"}
    await DropClientTraceContext(app)(lifespan, None, None)
    assert seen[-1] is lifespan


@pytest.mark.usefixtures("otlp_endpoint")
def test_public_services_trust_a_clients_trace_context_only_when_told() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    assert isinstance(edge_app(app, trust_client_context=False), DropClientTraceContext)
    assert edge_app(app, trust_client_context=True) is app


def test_one_delivery_span_per_run_and_client() -> None:
    other = PARENT.replace("ab", "ef")
    deliveries = Deliveries("s1")
    assert [deliveries.new(p) for p in (None, PARENT, PARENT, None, other, other)] == [
        None, PARENT, None, None, other, None]


async def test_a_task_started_detached_has_no_current_span() -> None:
    """A session's inbox loop, spawned while its wake is handled, must not live in the wake's trace."""
    async def current_trace() -> int:
        return trace.get_current_span().get_span_context().trace_id

    with TracerProvider().get_tracer("t").start_as_current_span("wake") as span:
        inherited = await asyncio.ensure_future(current_trace())
        with detached():
            alone = await asyncio.ensure_future(current_trace())
        assert trace.get_current_span() is span
    assert inherited == span.get_span_context().trace_id and alone == 0
