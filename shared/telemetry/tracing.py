"""OpenTelemetry for every service: the tracer provider, the W3C `traceparent` that carries one trace
across streams, the HTTP server span, and the trace ids on log lines (docs/architecture.md
"Observability"; deploy/README.md "Tracing with an OTLP backend").

Off by default: without `OTEL_EXPORTER_OTLP_ENDPOINT` the provider samples nothing (ALWAYS_OFF), so
every span is a non-recording one that only carries ids, FastAPI makes no request spans, and neither
inbox entries nor events carry a `traceparent` (bench/tracing_cost.py measures both modes). On: spans go to the OTLP/HTTP exporter through
a BatchSpanProcessor, sampled by the standard `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`
(the SDK reads them, and the `OTEL_BSP_*` batch settings, itself).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any

from fastapi.telemetry import TelemetryConfig
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.util.types import AttributeValue

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_TRACER = trace.get_tracer("gamma")
# Whether this process exports spans, fixed by `configure_tracing`: when not, the per-entry work of
# tracing (a traceparent in each inbox entry, the runtime's span per entry) is skipped outright.
_PROCESS = {"on": False}


def on() -> bool:
    return _PROCESS["on"]


def exporting() -> bool:
    """True when spans are exported (an OTLP endpoint is configured and the SDK is not disabled)."""
    # The OpenTelemetry SDK's own standard variables (its exporter reads them too): not Gamma settings.
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":  # noqa: TID251
        return False
    return any(os.environ.get(var) for var in ENDPOINT_VARS)  # noqa: TID251


def configure_tracing(service: str) -> None:
    """An SDK tracer provider, so a consumer's span, and everything it publishes, continue the
    producer's trace. When not exporting it samples nothing: building, timing and dropping a recorded
    span for every request, publish and consumed entry cost each service ~10% of its CPU under load
    (bench-inject, py-spy); a non-recording span still carries and propagates its trace id.
    Once per process: OpenTelemetry allows one global provider."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    _PROCESS["on"] = exporting()
    # sampler=None: the SDK takes OTEL_TRACES_SAMPLER(_ARG), parent-based always-on by default.
    provider = TracerProvider(resource=Resource.create({"service.name": f"gamma-{service}"}),
                              sampler=None if on() else ALWAYS_OFF)
    if on():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def traceparent(span: Span | None = None) -> str | None:
    """The W3C `traceparent` of `span` (default: the current one), None when it has no valid context."""
    context = trace.set_span_in_context(span) if span is not None else None
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier.get("traceparent")


def recorded_traceparent(span: Span) -> str | None:
    """`span`'s `traceparent` only when it is recorded (sampled and exported): what a hot path (the
    events stream, one entry per streamed chunk) carries, so nothing rides along when tracing is off."""
    return traceparent(span) if span.is_recording() else None


def context_of(parent: str | None) -> Any:
    """The OpenTelemetry context a `traceparent` names (the current one when it is None)."""
    return propagate.extract({"traceparent": parent}) if parent else None


@contextmanager
def span_from(name: str, parent: str | None, kind: SpanKind = SpanKind.CONSUMER,
              attributes: Mapping[str, AttributeValue] | None = None) -> Iterator[Span]:
    """A span continuing the trace of a stream entry's `traceparent` (the current trace without one);
    none at all when this process does not export (it would only carry ids: ~30 us per entry)."""
    if not on():
        yield trace.INVALID_SPAN
        return
    with _TRACER.start_as_current_span(name, context=context_of(parent), kind=kind,
                                       attributes=attributes) as span:
        yield span


def start_span(name: str, parent: str | None, kind: SpanKind = SpanKind.INTERNAL, *,
               attributes: Mapping[str, AttributeValue] | None = None, links: Sequence[Link] = ()) -> Span:
    """A span in the trace `parent` names that is never made current: for a generator that yields
    while the span is open (an SSE response), where attaching a context would leak it to the caller.
    The caller ends it."""
    return _TRACER.start_span(name, context=context_of(parent), kind=kind, attributes=attributes, links=links)


@contextmanager
def detached() -> Iterator[None]:
    """No current span while inside: a long-lived task started here (a session's inbox loop, made
    while its wake is handled) must not inherit the trace of the moment it was spawned, or all its
    later work and log lines would belong to that one trace."""
    token = otel_context.attach(otel_context.Context())
    try:
        yield
    finally:
        otel_context.detach(token)


def add_trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: `trace_id` and `span_id` of the current span, when there is one."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event.setdefault("trace_id", format(context.trace_id, "032x"))
        event.setdefault("span_id", format(context.span_id, "016x"))
    return event


TRACE_HEADERS = frozenset({b"traceparent", b"tracestate", b"baggage"})


class DropClientTraceContext:
    """Outermost ASGI layer of a public service, outside FastAPI's request span: a client's trace
    headers are removed, so its requests start traces of ours (GAMMA_TRACE_CLIENT_CONTEXT)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and any(name in TRACE_HEADERS for name, _ in scope["headers"]):
            scope = {**scope, "headers": [(n, v) for n, v in scope["headers"] if n not in TRACE_HEADERS]}
        await self.app(scope, receive, send)


def edge_app(app: Any, trust_client_context: bool) -> Any:
    """What a public service serves: `app`, behind `DropClientTraceContext` when tracing is on and a
    client's trace context is not trusted."""
    return DropClientTraceContext(app) if exporting() and not trust_client_context else app


UNOBSERVED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})  # probes and scrapes: no spans


def _unobserved(scope: MutableMapping[str, Any]) -> bool:
    return scope.get("path") in UNOBSERVED_PATHS


def app_telemetry() -> TelemetryConfig:
    """`FastAPI(telemetry=...)` for every service: FastAPI's own OpenTelemetry server span per request
    (named after the route template, `POST /sessions/{sid}/messages`, continuing an incoming
    `traceparent`), only when exporting; none for probes and scrapes, no spans per dependency or
    serialization step, no OpenTelemetry metrics or logs (Prometheus and structlog have those).
    Off, FastAPI adds nothing to a request at all. An SSE response stays one span, never one per write."""
    return {"tracing": exporting(), "metrics": False, "logs": False, "operation_spans": False,
            "auto_configure": False, "exclude": _unobserved}
