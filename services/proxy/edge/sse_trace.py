"""The SSE delivery span: an event written to a client continues the trace of the run that made it
(the `traceparent` the runtime puts beside the event, shared/contracts/events.py `EventEntry`).

One span per run a client gets events of, on the write that carries the run's first event, never
one per event: streamed text comes as many small events (docs/architecture.md "Observability")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind

from shared.telemetry.tracing import start_span

SPAN_NAME = "gamma:{sid}:events deliver"


class Deliveries:
    """One SSE client's delivery spans."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.last: str | None = None  # the run trace this client last got a span for
        # Made in the events request's context: each delivery span links to that request's span.
        request = trace.get_current_span().get_span_context()
        self.links = [Link(request)] if request.is_valid and request.trace_flags.sampled else []

    def new(self, parent: str | None) -> str | None:
        """`parent` when this client has not had a span for it yet (the run's first event), else None."""
        if parent is None or parent == self.last:
            return None
        self.last = parent
        return parent

    @contextmanager
    def delivering(self, parent: str, entry_id: str, events: int) -> Iterator[None]:
        """Around the write of a batch of frames: a span in the run's trace. Never made current: the
        write is a generator's yield (shared/telemetry/tracing.py `start_span`)."""
        span = start_span(SPAN_NAME, parent, SpanKind.PRODUCER, links=self.links, attributes={
            "messaging.system": "sse", "messaging.operation.type": "send",
            "messaging.destination.name": "gamma:{sid}:events", "gamma.session_id": self.sid,
            "gamma.sse.entry_id": entry_id, "messaging.batch.message_count": events})
        try:
            yield
        finally:
            span.end()
