"""The bus: FastStream on Redis Streams, with the rules of DESIGN.md "Bus rules".

- groups are created by us at id 0 with MKSTREAM before the broker starts (never at `$`);
- every subscription is a pair: a reader (`>`, batched: up to BATCH_SIZE entries per XREADGROUP, each
  handled on its own, acked together once their handlers returned), and a claimer (XAUTOCLAIM after
  `claim_idle_ms`, one entry at a time) that retries entries a crashed or failing consumer left
  pending, up to `max_deliveries`;
- an entry that does not validate (or cannot even be parsed), or that failed `max_deliveries` times,
  goes to `gamma:deadletter` and is acked, so one poison entry never stops a consumer;
- handlers raise to leave an entry pending; an entry is acked only after its handler returned;
- `publish` writes FastStream's envelope with the W3C trace context, so a handler runs in its
  producer's trace; `bench/bus.py` measures all this against raw redis-py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio as aioredis
import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import RedisStreamMessage
from faststream.redis.parser.binary import BinaryMessageFormatV1
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, TypeAdapter, ValidationError
from redis.exceptions import ResponseError

from . import keys, metrics
from .contracts.deadletter import DeadLetter
from .reconnect import broker_options

log = structlog.get_logger()
_TRACER = trace.get_tracer("gamma.bus")
M = TypeVar("M")
Handler = Callable[[Any], Awaitable[None]]


def consumer_name(service: str) -> str:
    """Stable per replica: the pod name (HOSTNAME) or host-pid when run locally."""
    return f"{service}-{os.environ.get('GAMMA_INSTANCE') or socket.gethostname()}-{os.getpid()}"


def _faststream_logger() -> logging.Logger:
    logger = logging.getLogger("gamma.faststream")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    return logger


def make_broker(redis_url: str, registry: CollectorRegistry | None = None, app_name: str = "gamma") -> RedisBroker:
    middlewares: list[Any] = []
    if registry is not None:
        from faststream.redis.prometheus import RedisPrometheusMiddleware

        middlewares.append(RedisPrometheusMiddleware(registry=registry, app_name=app_name))
    try:
        from faststream.redis.opentelemetry import RedisTelemetryMiddleware

        middlewares.append(RedisTelemetryMiddleware())
    except ImportError:  # pragma: no cover - otel extra missing
        pass
    broker = RedisBroker(
        redis_url,
        middlewares=middlewares,
        graceful_timeout=15.0,
        log_level=logging.DEBUG,  # per-message lines at DEBUG: we log ourselves
        # A plain stdlib logger outside the `faststream` hierarchy (which has FastStream's own coloured
        # handler and does not propagate): FastStream's warnings and errors reach the root handler
        # as JSON lines (shared/logging.py); its per-message INFO/DEBUG chatter stays off.
        logger=_faststream_logger(),
        **broker_options(),
    )
    if registry is not None:
        metrics.remember_broker(broker, registry)  # subscribe() reports delivery time and dead letters
    return broker


_ENSURED: weakref.WeakKeyDictionary[aioredis.Redis, set[tuple[str, str]]] = weakref.WeakKeyDictionary()


async def ensure_group(client: aioredis.Redis, stream: str, group: str, *, track: bool = True) -> None:
    """Create the group at id 0 (sees entries published before the first consumer ran).

    `track`: readiness (`missing_groups`) watches the group from now on; per-session groups (the
    inboxes) pass False, since a session's streams may legitimately go away."""
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
    if track:
        _ENSURED.setdefault(client, set()).add((stream, group))


def ensured_groups(client: aioredis.Redis) -> set[tuple[str, str]]:
    """The (stream, group) pairs `ensure_group` created through this client."""
    return set(_ENSURED.get(client, set()))


async def missing_groups(client: aioredis.Redis) -> list[str]:
    """Groups this service created that no longer exist (a FLUSHDB, a Redis restart without AOF):
    FastStream stops such a subscriber for good, so the service must report not ready (and be restarted)."""
    missing = []
    for stream, group in sorted(ensured_groups(client)):
        try:
            names = {_s(g["name"]) for g in await client.xinfo_groups(stream)}
        except ResponseError:  # no such key
            names = set()
        if group not in names:
            missing.append(f"{stream} ({group})")
    return missing


async def once(client: aioredis.Redis, scope: str, message_id: str, ttl_s: int = 7 * 24 * 3600) -> bool:
    """True the first time (scope, message_id) is seen: the idempotency gate for effects."""
    return bool(await client.set(keys.once(scope, message_id), "1", nx=True, ex=ttl_s))


async def publish(broker: RedisBroker, stream: str, message: BaseModel) -> str:
    """XADD one contract message in FastStream's envelope, with the W3C trace context in its headers.

    The envelope is the one `broker.publish` writes (FastStream subscribers and `decode_fields` read
    it), but it is built here and sent on the broker's connection: FastStream's publish pipeline
    (middlewares, DI, serializer) cost more than the XADD itself (bench/bus.py). The producer span
    and the `traceparent` header keep "one trace across streams"."""
    client = getattr(broker, "_connection", None)
    if not isinstance(client, aioredis.Redis):  # not connected, or a FastStream without that attribute
        entry_id = await broker.publish(message.model_dump(mode="json", by_alias=True), stream=stream)
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    headers: dict[str, str] = {"content-type": "application/json"}
    with _TRACER.start_as_current_span(f"{stream} publish", kind=SpanKind.PRODUCER):
        propagate.inject(headers)
        envelope = await BinaryMessageFormatV1.encode(
            message=message.model_dump_json(by_alias=True).encode(), reply_to=None, headers=headers,
            correlation_id=str(uuid.uuid4()),
        )
        added = await client.xadd(stream, {"__data__": envelope})
    return added.decode() if isinstance(added, bytes) else str(added)


async def dead_letter(
    client: aioredis.Redis, stream: str, group: str, entry_id: str, fields: dict[Any, Any], error: str, deliveries: int
) -> None:
    readable = {_s(k): _s(v)[:10_000] for k, v in fields.items()}
    if "__data__" in readable:
        # FastStream's binary envelope is unreadable as text: keep its JSON body beside it when it decodes.
        with contextlib.suppress(ValueError, TypeError):
            readable["__body__"] = json.dumps(decode_fields(fields)[0], ensure_ascii=False)[:10_000]
    record = DeadLetter(
        stream=stream,
        group=group,
        entry_id=entry_id,
        fields=readable,
        error=error[:2000],
        deliveries=deliveries,
    )
    await client.xadd(keys.DEADLETTER, {"data": record.model_dump_json()})
    log.error("dead_letter", stream=stream, group=group, entry_id=entry_id, error=error[:500], deliveries=deliveries)


def _s(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


UNPARSABLE = "__gamma_unparsable__"


def decode_entry(raw: dict[Any, Any], body: Any) -> Any:
    """FastStream decodes its own envelope to the JSON body; a plain XADD with a `data` field is accepted too."""
    if isinstance(body, dict) and UNPARSABLE in body:
        raise ValueError(f"entry could not be parsed: {body[UNPARSABLE]}")
    if isinstance(body, dict) and set(body) == {"data"} and isinstance(body["data"], str | bytes):
        return json.loads(body["data"])
    return body


BATCH_SIZE = 100
READ_LINGER_S = 0.005
BATCH_ENTRIES = "gamma_entries"


async def stash_batch_parser(msg: Any, original: Callable[[Any], Awaitable[Any]]) -> Any:
    """Hand the batch's raw entries to the handler untouched (see `decode_fields`)."""
    return await original({**msg, "data": [], BATCH_ENTRIES: msg.get("data", [])})


def decode_fields(fields: dict[Any, Any]) -> tuple[Any, dict[str, Any]]:
    """One stream entry -> (JSON body, headers): a FastStream envelope in `__data__` (what `publish`
    writes), or a plain XADD (`data` = JSON, or the fields themselves). Raises ValueError if invalid."""
    envelope = fields.get(b"__data__", fields.get("__data__"))
    if envelope is not None:
        body, headers = BinaryMessageFormatV1.parse(envelope if isinstance(envelope, bytes) else envelope.encode())
        return json.loads(body), headers
    plain = {_strict(k): _strict(v) for k, v in fields.items()}
    if set(plain) == {"data"}:
        return json.loads(plain["data"]), {}
    return plain, {}


def _strict(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)  # UnicodeDecodeError is a ValueError


async def safe_parser(msg: Any, original: Callable[[Any], Awaitable[Any]]) -> Any:
    """FastStream's parser raises on some entries (e.g. a plain XADD with non-UTF-8 bytes); the error
    then escapes our handler, so the entry is never acked nor dead-lettered and the claimer retries it
    forever. Parse such an entry as a marked, UTF-8-safe dict instead: `decode_entry` rejects it and
    the handler dead-letters it at once like any other invalid entry."""
    try:
        return await original(msg)
    except Exception as exc:  # noqa: BLE001 - any parse failure means "invalid entry"
        fields = msg.get("data") if isinstance(msg, dict) else None
        safe: dict[bytes, bytes] = {UNPARSABLE.encode(): repr(exc)[:500].encode()}
        if isinstance(fields, dict):
            for key, value in fields.items():
                name = _s(key)
                safe[(name if name != "__data__" else "__data_unparsable__").encode()] = _s(value).encode()
        return await original({**msg, "data": safe})


@dataclass
class Subscription:
    stream: str
    group: str
    adapter: TypeAdapter[Any]
    handler: Handler


DEADLETTER_COUNTER_NAME = "gamma_deadletter_total"


def subscribe(
    broker: RedisBroker,
    client: aioredis.Redis,
    *,
    stream: str,
    group: str,
    consumer: str,
    model: type[BaseModel] | TypeAdapter[Any],
    handler: Handler,
    claim_idle_ms: int = 5_000,
    max_deliveries: int = 5,
    polling_interval_ms: int = 100,
    deadletters: Counter | None = None,
) -> Subscription:
    """Register the reader and the claimer for one (stream, group). Call `ensure_group` before start."""
    adapter = model if isinstance(model, TypeAdapter) else TypeAdapter(model)
    registry = metrics.registry_of(broker)
    if deadletters is None and registry is not None:
        deadletters = metrics.deadletter_counter(registry)

    async def consume(body: Any, msg: RedisStreamMessage, claimed: bool) -> None:
        raw: Any = msg.raw_message
        entry_id = _s(raw.get("message_ids", [b"?"])[0]) if isinstance(raw, dict) else "?"
        fields = raw.get("data", {}) if isinstance(raw, dict) else {}
        deliveries = await msg.get_delivery_count() if claimed else 1
        if claimed and deliveries > max_deliveries:
            await dead_letter(client, stream, group, entry_id, fields, "delivery cap reached", deliveries)
            if deadletters is not None:
                deadletters.inc()
            return
        try:
            value = adapter.validate_python(decode_entry(raw, body))
        except (ValidationError, ValueError, TypeError) as exc:
            await dead_letter(client, stream, group, entry_id, fields, f"invalid entry: {exc}", deliveries)
            if deadletters is not None:
                deadletters.inc()
            return
        with structlog.contextvars.bound_contextvars(stream=stream, entry_id=entry_id):
            await handler(value)  # raising leaves the entry pending for the claimer
        metrics.observe_handled(registry, stream, group, entry_id)

    async def read_batch(_: Any) -> None:
        """The reader's handler: one call per XREADGROUP batch, each entry handled on its own.

        A valid entry's handler runs in the producer's trace; entries whose handler returned are
        acked together at the end of the batch (or when the batch is cut short); an invalid entry is
        dead-lettered and acked at once; an entry whose handler raised stays pending for the claimer.
        """
        raw: Any = broker.context.get_local("message").raw_message
        ids: list[Any] = raw["message_ids"]
        done: list[bytes] = []
        touched = time.monotonic()
        try:
            for index, (entry_id_b, fields) in enumerate(zip(ids, raw[BATCH_ENTRIES], strict=True)):
                if not reader.running:
                    break  # shutting down: the rest stays pending and is reclaimed
                if time.monotonic() - touched > claim_idle_ms / 3000:
                    # A slow batch: ack what is done, and reset the idle time of the entries still waiting
                    # here, or the claimer would take them over while this reader is alive and about to
                    # handle them.
                    if done:
                        await client.xack(stream, group, *done)
                        done.clear()
                    await client.xclaim(stream, group, consumer, min_idle_time=0, message_ids=ids[index:],
                                        justid=True)
                    touched = time.monotonic()
                entry_id = _s(entry_id_b)
                try:
                    body, headers = decode_fields(fields)
                    value = adapter.validate_python(body)
                except (ValidationError, ValueError, TypeError) as exc:
                    await dead_letter(client, stream, group, entry_id, fields, f"invalid entry: {exc}", 1)
                    if deadletters is not None:
                        deadletters.inc()
                    done.append(entry_id_b)
                    continue
                try:
                    with _TRACER.start_as_current_span(
                        f"{stream} process", context=propagate.extract(headers), kind=SpanKind.CONSUMER
                    ), structlog.contextvars.bound_contextvars(stream=stream, entry_id=entry_id):
                        await handler(value)
                except Exception as exc:  # noqa: BLE001 - stays pending; the claimer retries it
                    log.warning("handler_failed", stream=stream, group=group, entry_id=entry_id,
                                error=f"{type(exc).__name__}: {exc}"[:500], exc_info=True)
                    continue
                metrics.observe_handled(registry, stream, group, entry_id)
                done.append(entry_id_b)
        finally:
            if done:
                await client.xack(stream, group, *done)
        if len(raw["message_ids"]) < BATCH_SIZE and reader.running:
            # Linger a moment before the next read (like Kafka's fetch.min.wait): under a steady
            # stream of single entries each read would otherwise pay FastStream's whole per-batch pass
            # for one entry; this lets entries gather into batches at the cost of <= READ_LINGER_S of
            # latency. A full batch (a backlog) reads again at once.
            await asyncio.sleep(READ_LINGER_S)

    # Batched reads: one FastStream pass (parser, middlewares, context) and one XACK per batch instead
    # of per entry; that pass cost far more than the Redis round trips (bench/bus.py). The parser only
    # stashes the raw entries: `decode_fields` decodes each one, so one bad entry spoils nothing else.
    reader = broker.subscriber(
        stream=StreamSub(stream, group=group, consumer=consumer, polling_interval=polling_interval_ms,
                         batch=True, max_records=BATCH_SIZE),
        ack_policy=AckPolicy.MANUAL,
        parser=stash_batch_parser,
        title=f"{stream}:{group}",
    )
    reader(read_batch)

    @broker.subscriber(
        stream=StreamSub(
            stream,
            group=group,
            consumer=f"{consumer}-claimer",
            min_idle_time=claim_idle_ms,
            polling_interval=max(polling_interval_ms, 250),
        ),
        ack_policy=AckPolicy.NACK_ON_ERROR,
        parser=safe_parser,
        include_in_schema=False,
    )
    async def _claimer(body: Any) -> None:
        await consume(body, broker.context.get_local("message"), claimed=True)

    return Subscription(stream=stream, group=group, adapter=adapter, handler=handler)
