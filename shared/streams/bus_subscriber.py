"""The two consumers of one (stream, group), in the manner of FastStream's subscriber classes:

- `BatchReader` reads new entries (`>`, batched: up to BATCH_SIZE entries per XREADGROUP), handles
  each on its own and acks together the ones whose handler returned; `WindowReader`
  (shared/streams/bus_window.py) reads them into a sliding window of entries in flight instead;
- `Claimer` takes over entries left pending longer than `claim_idle_ms` (XAUTOCLAIM, one at a time),
  by a crashed consumer or a handler that raised, and retries them up to `max_deliveries`.

Both dead-letter an entry that does not validate (or cannot even be parsed), and the claimer an
entry that failed `max_deliveries` times, so one poison entry never stops a consumer. Handlers raise
to leave an entry pending; an entry is acked only after its handler returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import RedisStreamMessage
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry, Counter
from pydantic import TypeAdapter, ValidationError

from shared.redis.redis_wire import lenient_text
from shared.storage.disk import storage_fault
from shared.streams.bus_entries import (
    BATCH_ENTRIES,
    dead_letter,
    decode_entry,
    decode_fields,
    safe_parser,
    stash_batch_parser,
)
from shared.telemetry import metrics

log = structlog.get_logger()
_TRACER = trace.get_tracer("gamma.bus")
Handler = Callable[[Any], Awaitable[None]]
# What orders a stream's entries: entries with the same key are handled one after another, in stream
# order; entries with different keys concurrently. None: the whole batch in order.
OrderKey = Callable[[Any], Hashable]


def by_session(value: Any) -> Hashable:
    """The order key of per-session messages: their session; others (no `session_id`) share one lane."""
    return getattr(value, "session_id", None)

BATCH_SIZE = 100
READ_LINGER_S = 0.005

# The Prometheus registry a broker reports to (`make_broker(url, registry)`): its subscriptions time
# each handled entry and count dead letters there without the service passing anything more.
_REGISTRIES: weakref.WeakKeyDictionary[RedisBroker, CollectorRegistry] = weakref.WeakKeyDictionary()


# The subscriptions made on each broker, for the interface documents (tools/docs.py).
_SUBSCRIPTIONS: weakref.WeakKeyDictionary[RedisBroker, list[Subscription]] = weakref.WeakKeyDictionary()


def report_to(broker: RedisBroker, registry: CollectorRegistry) -> None:
    _REGISTRIES[broker] = registry


def subscriptions_of(broker: RedisBroker) -> list[Subscription]:
    return list(_SUBSCRIPTIONS.get(broker, ()))


def registry_of(broker: RedisBroker) -> CollectorRegistry | None:
    return _REGISTRIES.get(broker)


def record(broker: RedisBroker, subscription: Subscription) -> None:
    _SUBSCRIPTIONS.setdefault(broker, []).append(subscription)


@dataclass
class Subscription:
    stream: str
    group: str
    adapter: TypeAdapter[Any]
    handler: Handler


@dataclass(frozen=True)
class Route:
    """Everything both consumers of one (stream, group) share."""

    broker: RedisBroker
    client: aioredis.Redis
    stream: str
    group: str
    consumer: str
    adapter: TypeAdapter[Any]
    handler: Handler
    claim_idle_ms: int
    max_deliveries: int
    polling_interval_ms: int
    deadletters: Counter | None
    registry: CollectorRegistry | None
    order_key: OrderKey | None = None
    batch_size: int = BATCH_SIZE
    pause: Callable[[], Awaitable[None]] | None = None  # awaited before each next read
    # Entries whose handler last failed on a full or failing disk: retried past the delivery cap, as
    # that passes when the disk does (README "Reliability"); shared by the reader and the claimer.
    disk_failed: set[str] = field(default_factory=set)


DISK_FAILED_MAX = 10_000  # bounds the set above: past it, the cap applies again


class _Consumer:
    def __init__(self, route: Route) -> None:
        self.route = route

    def failed(self, entry_id: str, exc: BaseException) -> None:
        if storage_fault(exc) is not None and len(self.route.disk_failed) < DISK_FAILED_MAX:
            self.route.disk_failed.add(entry_id)

    async def reject(self, entry_id: str, fields: dict[Any, Any], error: str, deliveries: int) -> None:
        """Dead-letter the entry (the caller acks it)."""
        r = self.route
        await dead_letter(r.client, r.stream, r.group, entry_id, fields, error, deliveries)
        if r.deadletters is not None:
            r.deadletters.inc()

    def handled(self, entry_id: str) -> None:
        metrics.observe_handled(self.route.registry, self.route.stream, self.route.group, entry_id)


class BatchReader(_Consumer):
    """`XREADGROUP ... >` in batches: one FastStream pass (parser, middlewares, context) and one XACK
    per batch instead of per entry; that pass cost far more than the Redis round trips (bench/bus.py).
    The parser only stashes the raw entries: `decode_fields` decodes each one, so one bad entry spoils
    nothing else."""

    def register(self) -> None:
        r = self.route
        self.subscriber = r.broker.subscriber(
            stream=StreamSub(r.stream, group=r.group, consumer=r.consumer, polling_interval=r.polling_interval_ms,
                             batch=True, max_records=r.batch_size),
            ack_policy=AckPolicy.MANUAL,
            parser=stash_batch_parser,
            title=f"{r.stream}:{r.group}",
        )

        async def read_batch(_: Any) -> None:
            await self.read_batch(r.broker.context.get_local("message").raw_message)

        self.subscriber(read_batch)

    async def read_batch(self, raw: Any) -> None:
        """One call per XREADGROUP batch, each entry handled on its own.

        A valid entry's handler runs in the producer's trace; entries whose handler returned are
        acked together at the end of the batch (or when the batch is cut short); an invalid entry is
        dead-lettered and acked at once; an entry whose handler raised stays pending for the claimer.
        """
        r = self.route
        ids: list[Any] = raw["message_ids"]
        if r.order_key is not None:
            await self.read_batch_by_key(ids, raw[BATCH_ENTRIES], r.order_key)
        else:
            await self.read_batch_in_order(ids, raw[BATCH_ENTRIES])
        if len(ids) < r.batch_size and self.subscriber.running:
            # Linger a moment before the next read (like Kafka's fetch.min.wait): under a steady
            # stream of single entries each read would otherwise pay FastStream's whole per-batch pass
            # for one entry; this lets entries gather into batches at the cost of <= READ_LINGER_S of
            # latency. A full batch (a backlog) reads again at once.
            await asyncio.sleep(READ_LINGER_S)
        if r.pause is not None and self.subscriber.running:
            await r.pause()

    async def read_batch_in_order(self, ids: list[Any], entries: list[Any]) -> None:
        r = self.route
        done: list[bytes] = []
        touched = time.monotonic()
        try:
            for index, (entry_id_b, fields) in enumerate(zip(ids, entries, strict=True)):
                if not self.subscriber.running:
                    break  # shutting down: the rest stays pending and is reclaimed
                if time.monotonic() - touched > r.claim_idle_ms / 3000:
                    await self.keep_claimed(done, ids[index:])
                    touched = time.monotonic()
                if await self.handle(lenient_text(entry_id_b), fields):
                    done.append(entry_id_b)
        finally:
            if done:
                await r.client.xack(r.stream, r.group, *done)

    async def validated(self, entry_id_b: bytes, fields: dict[Any, Any]) -> tuple[Any] | None:
        """The entry's value (in a 1-tuple: a value may be None); None once an entry that does not
        validate is dead-lettered (the caller acks it)."""
        try:
            body, _ = decode_fields(fields)
            return (self.route.adapter.validate_python(body),)
        except (ValidationError, ValueError, TypeError) as exc:
            await self.reject(lenient_text(entry_id_b), fields, f"invalid entry: {exc}", 1)
            return None

    async def read_batch_by_key(self, ids: list[Any], entries: list[Any], order_key: OrderKey) -> None:
        """Entries of one key (a session) in order, the keys concurrently. Handlers that wait on Redis
        and the disk made one consumer a queue: a digest handling 200 sessions' saves one after another
        held the last save seconds behind the first (bench-e2e: file save -> inbox p50 11.7 s while a
        notification took 76 ms). An entry that does not validate has no key: it is dead-lettered here."""
        r = self.route
        lanes: dict[Hashable, list[tuple[bytes, Any, dict[Any, Any]]]] = {}
        done: list[bytes] = []
        for entry_id_b, fields in zip(ids, entries, strict=True):
            parsed = await self.validated(entry_id_b, fields)
            if parsed is None:
                done.append(entry_id_b)
                continue
            lanes.setdefault(order_key(parsed[0]), []).append((entry_id_b, parsed[0], fields))
        pending = {entry_id_b for lane in lanes.values() for entry_id_b, _, _ in lane}

        async def run_lane(lane: list[tuple[bytes, Any, dict[Any, Any]]]) -> None:
            for entry_id_b, _, fields in lane:
                if not self.subscriber.running:
                    return  # shutting down: the rest stays pending and is reclaimed
                ok = await self.handle(lenient_text(entry_id_b), fields)
                pending.discard(entry_id_b)
                if not ok:
                    return  # a later entry of this key must not overtake the failed one: all stay pending
                done.append(entry_id_b)

        stop = asyncio.Event()
        keeper = asyncio.create_task(self.keep_pending(pending, stop))
        try:
            await asyncio.gather(*(run_lane(lane) for lane in lanes.values()))
        finally:
            # The event as well as the cancel: on Python 3.11 a cancel landing inside a redis-py command
            # can be swallowed, and a keeper left running would keep a failed entry from the claimer.
            stop.set()
            keeper.cancel()
            if done:
                await r.client.xack(r.stream, r.group, *done)

    async def keep_pending(self, pending: set[bytes], stop: asyncio.Event) -> None:
        """While a concurrent batch runs, reset the idle time of its entries not handled yet, so the
        claimer does not take them over from a live reader (as `keep_claimed` does in order)."""
        r = self.route
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), r.claim_idle_ms / 3000)
            if pending and not stop.is_set():
                await r.client.xclaim(r.stream, r.group, r.consumer, min_idle_time=0,
                                      message_ids=list(pending), justid=True)

    async def keep_claimed(self, done: list[bytes], waiting: list[Any]) -> None:
        """A slow batch: ack what is done, and reset the idle time of the entries still waiting here,
        or the claimer would take them over while this reader is alive and about to handle them."""
        r = self.route
        if done:
            await r.client.xack(r.stream, r.group, *done)
            done.clear()
        await r.client.xclaim(r.stream, r.group, r.consumer, min_idle_time=0, message_ids=waiting, justid=True)

    async def handle(self, entry_id: str, fields: dict[Any, Any]) -> bool:
        """True when the entry is done with (handled, or dead-lettered): ack it."""
        r = self.route
        try:
            body, headers = decode_fields(fields)
            value = r.adapter.validate_python(body)
        except (ValidationError, ValueError, TypeError) as exc:
            await self.reject(entry_id, fields, f"invalid entry: {exc}", 1)
            return True
        try:
            with _TRACER.start_as_current_span(
                f"{r.stream} process", context=propagate.extract(headers), kind=SpanKind.CONSUMER
            ), structlog.contextvars.bound_contextvars(stream=r.stream, entry_id=entry_id):
                await r.handler(value)
        except Exception as exc:  # noqa: BLE001 - stays pending; the claimer retries it
            log.warning("handler_failed", stream=r.stream, group=r.group, entry_id=entry_id,
                        error=f"{type(exc).__name__}: {exc}"[:500], exc_info=True)
            self.failed(entry_id, exc)
            return False
        r.disk_failed.discard(entry_id)
        self.handled(entry_id)
        return True


class Claimer(_Consumer):
    """XAUTOCLAIM of entries idle longer than `claim_idle_ms`, one at a time; FastStream acks an entry
    whose handler returned and leaves pending one whose handler raised (NACK_ON_ERROR)."""

    def register(self) -> None:
        r = self.route
        subscriber = r.broker.subscriber(
            stream=StreamSub(
                r.stream,
                group=r.group,
                consumer=f"{r.consumer}-claimer",
                min_idle_time=r.claim_idle_ms,
                polling_interval=max(r.polling_interval_ms, 250),
            ),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            parser=safe_parser,
            include_in_schema=False,
        )

        async def claimed(body: Any) -> None:
            await self.consume(body, r.broker.context.get_local("message"))

        subscriber(claimed)

    async def consume(self, body: Any, msg: RedisStreamMessage) -> None:
        r = self.route
        raw: Any = msg.raw_message
        entry_id = lenient_text(raw.get("message_ids", [b"?"])[0]) if isinstance(raw, dict) else "?"
        fields = raw.get("data", {}) if isinstance(raw, dict) else {}
        deliveries = await msg.get_delivery_count()
        if deliveries > r.max_deliveries and entry_id not in r.disk_failed:
            await self.reject(entry_id, fields, "delivery cap reached", deliveries)
            return
        try:
            value = r.adapter.validate_python(decode_entry(raw, body))
        except (ValidationError, ValueError, TypeError) as exc:
            await self.reject(entry_id, fields, f"invalid entry: {exc}", deliveries)
            return
        with structlog.contextvars.bound_contextvars(stream=r.stream, entry_id=entry_id):
            try:
                await r.handler(value)  # raising leaves the entry pending for the claimer
            except Exception as exc:
                self.failed(entry_id, exc)
                raise
        r.disk_failed.discard(entry_id)
        self.handled(entry_id)
