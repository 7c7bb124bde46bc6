"""The bus: FastStream on Redis Streams, with the rules of DESIGN.md "Bus rules".

- groups are created by us at id 0 with MKSTREAM before the broker starts (never at `$`);
- every subscription is a pair: a reader (`>`), and a claimer (XAUTOCLAIM after `claim_idle_ms`)
  that retries entries a crashed or failing consumer left pending, up to `max_deliveries`;
- an entry that does not validate, or that failed `max_deliveries` times, goes to `gamma:deadletter`
  and is acked, so one poison entry never stops a consumer;
- handlers raise to leave an entry pending; FastStream acks only after the handler returned.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio as aioredis
import structlog
from faststream import AckPolicy
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.annotations import RedisStreamMessage
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, TypeAdapter, ValidationError
from redis.exceptions import ResponseError

from . import keys
from .contracts.deadletter import DeadLetter

log = structlog.get_logger()
M = TypeVar("M")
Handler = Callable[[Any], Awaitable[None]]


def consumer_name(service: str) -> str:
    """Stable per replica: the pod name (HOSTNAME) or host-pid when run locally."""
    return f"{service}-{os.environ.get('GAMMA_INSTANCE') or socket.gethostname()}-{os.getpid()}"


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
    return RedisBroker(
        redis_url,
        middlewares=middlewares,
        graceful_timeout=15.0,
        log_level=logging.DEBUG,  # per-message lines at DEBUG: we log ourselves
        # A plain stdlib logger under `faststream` (WARNING in services): FastStream's errors go through
        # the root handler as JSON lines instead of its own coloured text handler.
        logger=logging.getLogger("faststream.gamma"),
    )


async def ensure_group(client: aioredis.Redis, stream: str, group: str) -> None:
    """Create the group at id 0 (sees entries published before the first consumer ran)."""
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def once(client: aioredis.Redis, scope: str, message_id: str, ttl_s: int = 7 * 24 * 3600) -> bool:
    """True the first time (scope, message_id) is seen: the idempotency gate for effects."""
    return bool(await client.set(keys.once(scope, message_id), "1", nx=True, ex=ttl_s))


async def publish(broker: RedisBroker, stream: str, message: BaseModel) -> str:
    """XADD one contract message through FastStream (its envelope carries trace headers)."""
    entry_id = await broker.publish(message.model_dump(mode="json", by_alias=True), stream=stream)
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def dead_letter(
    client: aioredis.Redis, stream: str, group: str, entry_id: str, fields: dict[Any, Any], error: str, deliveries: int
) -> None:
    record = DeadLetter(
        stream=stream,
        group=group,
        entry_id=entry_id,
        fields={_s(k): _s(v)[:10_000] for k, v in fields.items()},
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

    @broker.subscriber(
        stream=StreamSub(stream, group=group, consumer=consumer, polling_interval=polling_interval_ms),
        ack_policy=AckPolicy.NACK_ON_ERROR,
        parser=safe_parser,
        title=f"{stream}:{group}",
    )
    # The message comes from FastStream's context, not from a `msg: RedisStreamMessage` parameter:
    # fast-depends resolves that annotation with a sync `Context.use`, i.e. one thread-pool hop per
    # message, which cost more than the rest of the consume path together (bench/bus.py).
    async def _reader(body: Any) -> None:
        await consume(body, broker.context.get_local("message"), claimed=False)

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
