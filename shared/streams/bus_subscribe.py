"""`subscribe`: the reader and the claimer of one (stream, group), the reader in the read shape asked
for (shared/streams/bus_subscriber.py: batches, in order or by key; shared/streams/bus_window.py: a sliding window)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from faststream.redis import RedisBroker
from prometheus_client import Counter
from pydantic import BaseModel, TypeAdapter

from shared.streams.bus_subscriber import (
    BATCH_SIZE,
    BatchReader,
    Claimer,
    Handler,
    OrderKey,
    Route,
    Subscription,
    record,
    registry_of,
)
from shared.streams.bus_window import WindowReader
from shared.telemetry import metrics


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
    order_key: OrderKey | None = None,
    batch_size: int = BATCH_SIZE,
    pause: Callable[[], Awaitable[None]] | None = None,
    window: int | None = None,
) -> Subscription:
    """Register the reader and the claimer for one (stream, group). Call `ensure_group` before start.
    `batch_size`: entries per read; a consumer whose entries are costly and worth spreading over its
    peers (the runtime's wakes) reads few at a time, since one read takes all it returns; `pause`,
    awaited after each batch, lets such a consumer leave the next entries to its peers for a while.
    `window`: keep up to that many entries in flight and read `batch_size` more as soon as that many
    are done (shared/streams/bus_window.py), instead of reading again only once a whole batch is done."""
    adapter = model if isinstance(model, TypeAdapter) else TypeAdapter(model)
    registry = registry_of(broker)
    if deadletters is None and registry is not None:
        deadletters = metrics.deadletter_counter(registry)
    route = Route(broker=broker, client=client, stream=stream, group=group, consumer=consumer, adapter=adapter,
                  handler=handler, claim_idle_ms=claim_idle_ms, max_deliveries=max_deliveries,
                  polling_interval_ms=polling_interval_ms, deadletters=deadletters, registry=registry,
                  order_key=order_key, batch_size=batch_size, pause=pause)
    (WindowReader(route, window) if window is not None else BatchReader(route)).register()
    Claimer(route).register()
    subscription = Subscription(stream=stream, group=group, adapter=adapter, handler=handler)
    record(broker, subscription)
    return subscription
