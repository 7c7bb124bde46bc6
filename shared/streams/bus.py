"""The bus: FastStream on Redis Streams, with the rules of docs/architecture.md "Streams".

- groups are created by us at id 0 with MKSTREAM before the broker starts (never at `$`);
- every subscription is a pair, a reader and a claimer (shared/streams/bus_subscriber.py), over the entry
  codec and the dead-letter stream of shared/streams/bus_entries.py;
- `Publisher` writes FastStream's envelope with the W3C trace context, so a handler runs in its
  producer's trace; `bench/bus.py` measures all this against raw redis-py.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Mapping
from typing import Any, cast

import redis.asyncio as aioredis
import structlog
from faststream.redis import RedisBroker, RedisClusterBroker
from faststream.redis.parser.binary import BinaryMessageFormatV1
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from shared.redis import topology
from shared.redis.reconnect import broker_options
from shared.redis.redis_cluster import cluster_url, durable, extra_nodes, is_cluster
from shared.redis.redis_wire import lenient_text, text
from shared.redis.topology import consumer_name
from shared.streams.bus_entries import (
    BATCH_ENTRIES,
    UNPARSABLE,
    dead_letter,
    decode_entry,
    decode_fields,
    safe_parser,
    stash_batch_parser,
)
from shared.streams.bus_subscribe import subscribe
from shared.streams.bus_subscriber import (
    BATCH_SIZE,
    READ_LINGER_S,
    BatchReader,
    Claimer,
    Handler,
    OrderKey,
    Subscription,
    by_session,
    report_to,
    subscriptions_of,
)
from shared.streams.bus_window import WindowReader

__all__ = [
    "BATCH_ENTRIES", "BATCH_SIZE", "READ_LINGER_S", "UNPARSABLE", "BatchReader", "Claimer", "Handler", "Publisher", "WindowReader",
    "OrderKey", "Subscription", "by_session", "consumer_name", "dead_letter", "decode_entry", "decode_fields", "ensure_group",
    "ensured_groups", "make_broker", "missing_groups", "publish", "safe_parser", "stash_batch_parser",
    "start_subscriptions", "subscribe", "subscribe_service", "subscriptions_of",
]

log = structlog.get_logger()
_TRACER = trace.get_tracer("gamma.bus")


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
    # On a cluster, FastStream's cluster broker: each of its stream subscriptions reads one stream (one
    # slot), so the readers and claimers below work unchanged (bench/bus.py measures both side by side).
    broker_class = RedisClusterBroker if is_cluster(redis_url) else RedisBroker
    cluster_options: dict[str, Any] = (
        {"startup_nodes": extra_nodes()} if broker_class is RedisClusterBroker and extra_nodes() else {})
    broker = broker_class(
        cluster_url(redis_url) if broker_class is RedisClusterBroker else redis_url,
        middlewares=middlewares,
        graceful_timeout=15.0,
        log_level=logging.DEBUG,  # per-message lines at DEBUG: we log ourselves
        # A plain stdlib logger outside the `faststream` hierarchy (which has FastStream's own coloured
        # handler and does not propagate): FastStream's warnings and errors reach the root handler
        # as JSON lines (shared/telemetry/logging.py); its per-message INFO/DEBUG chatter stays off.
        logger=_faststream_logger(),
        **broker_options(),
        **cluster_options,
    )
    if registry is not None:
        report_to(broker, registry)  # its subscriptions report delivery time and dead letters
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
            names = {lenient_text(g["name"]) for g in await client.xinfo_groups(stream)}
        except ResponseError:  # no such key
            names = set()
        if group not in names:
            missing.append(f"{stream} ({group})")
    return missing


class Publisher:
    """XADD contract messages in FastStream's envelope, with the W3C trace context in their headers.

    The envelope is the one `broker.publish` writes (FastStream subscribers and `decode_fields` read
    it), but it is built here and sent on the broker's connection: FastStream's publish pipeline
    (middlewares, DI, serializer) cost more than the XADD itself (bench/bus.py). The producer span
    and the `traceparent` header keep "one trace across streams"."""

    def __init__(self, broker: RedisBroker) -> None:
        self.broker = broker

    async def publish(self, stream: str, message: BaseModel) -> str:
        client = getattr(self.broker, "_connection", None)
        if not isinstance(client, (aioredis.Redis, RedisCluster)):  # not connected, or a FastStream without that attribute
            entry_id = await self.broker.publish(message.model_dump(mode="json", by_alias=True), stream=stream)
            return text(entry_id)
        headers: dict[str, str] = {"content-type": "application/json"}
        with _TRACER.start_as_current_span(f"{stream} publish", kind=SpanKind.PRODUCER):
            propagate.inject(headers)
            envelope = await BinaryMessageFormatV1.encode(
                message=message.model_dump_json(by_alias=True).encode(), reply_to=None, headers=headers,
                correlation_id=str(uuid.uuid4()),
            )
            # A service stream entry is another service's input, acknowledged upstream (a wake for a
            # 202 prompt, an artifact change for a saved file): on a cluster, on a replica first.
            added = await durable(cast(aioredis.Redis, client), stream, "XADD", stream, "*", "__data__", envelope)
        return text(added)


def subscribe_service(broker: RedisBroker, client: aioredis.Redis, service: str, handlers: Mapping[str, Handler],
                      *, claim_idle_ms: int, max_deliveries: int,
                      order_key: OrderKey | None = None) -> list[Subscription]:
    """A reader and a claimer for every stream `service` consumes (shared/redis/topology.py), each with its
    handler (by stream). Start them with `start_subscriptions`. With `order_key` (e.g. `by_session`)
    a batch's entries are handled concurrently across keys, in order within one."""
    consumer = consumer_name(service)
    return [subscribe(broker, client, stream=c.stream, group=c.group, consumer=consumer, model=c.model,
                      handler=handlers[c.stream], claim_idle_ms=claim_idle_ms, max_deliveries=max_deliveries,
                      order_key=order_key)
            for c in topology.consumptions(service)]


async def start_subscriptions(client: aioredis.Redis, broker: RedisBroker, subs: list[Subscription]) -> None:
    """Groups first (at id 0: entries published before the first start are read), then the broker."""
    for sub in subs:
        await ensure_group(client, sub.stream, sub.group)
    await broker.start()


async def publish(broker: RedisBroker, stream: str, message: BaseModel) -> str:
    """`Publisher(broker).publish(stream, message)`: XADD one contract message; returns the entry id."""
    return await Publisher(broker).publish(stream, message)
