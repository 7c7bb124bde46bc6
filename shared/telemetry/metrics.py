"""Prometheus metrics of the Gamma services, on each service's own registry (`ServiceContext.registry`).

Two kinds:
- read from Redis at scrape time (`StreamStats`): per consumer group on the streams a service reads,
  the lag (entries not yet delivered to the group) and the pending count (delivered, not acked), plus
  the length of `gamma:deadletter`. Computing them at scrape time keeps them true even when the
  service itself is stuck, which is exactly when they matter.
- recorded by the code that sees the event, through the small functions below:
  `injection_delivered`, `observe_wake`, `model_request`, `track_active_leases`, `dead_lettered`.

Every function takes the registry, so tests and services that share a process never mix their
numbers; the metric objects are created once per registry (`for_registry`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.redis import keys, redis_cluster, replicas, topology
from shared.redis.redis_wire import id_ms, text

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TOKEN_BUCKETS = (256, 1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144)


@dataclass
class GammaMetrics:
    """The metric objects of one registry."""

    injections_delivered: Counter
    wake_latency: Histogram
    model_requests: Counter
    model_prompt_tokens: Histogram
    model_shared_prefix_tokens: Histogram
    model_prompt_tokens_total: Counter
    model_shared_prefix_tokens_total: Counter
    model_completion_tokens_total: Counter
    model_input_tokens_total: Counter
    model_cached_tokens_total: Counter
    model_reasoning_tokens_total: Counter
    active_leases: Gauge
    deadletters: Counter
    stream_delivery: Histogram
    leases_tracked: bool = False  # the runtime reports its own count; else StreamStats counts at scrape


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, GammaMetrics] = weakref.WeakKeyDictionary()


def for_registry(registry: CollectorRegistry) -> GammaMetrics:
    """The metric objects registered on `registry` (created on first use)."""
    found = _BY_REGISTRY.get(registry)
    if found is not None:
        return found
    m = GammaMetrics(
        injections_delivered=Counter(
            "gamma_injections_delivered", "Trusted runtime injections delivered into a session, by kind and source",
            ["kind", "source"], registry=registry,
        ),
        wake_latency=Histogram(
            "gamma_wake_latency_seconds", "From the Wake entry's publish time to the session being live",
            buckets=LATENCY_BUCKETS, registry=registry,
        ),
        model_requests=Counter("gamma_model_requests", "Model requests sent", ["model"], registry=registry),
        model_prompt_tokens=Histogram(
            "gamma_model_request_prompt_tokens", "Prompt tokens per model request", buckets=TOKEN_BUCKETS, registry=registry,
        ),
        model_shared_prefix_tokens=Histogram(
            "gamma_model_request_shared_prefix_tokens",
            "Tokens of the byte-identical static prefix (system prompt and tool schemas) per model request",
            buckets=TOKEN_BUCKETS, registry=registry,
        ),
        model_prompt_tokens_total=Counter(
            "gamma_model_prompt_tokens", "Prompt tokens sent, summed", ["model"], registry=registry,
        ),
        model_shared_prefix_tokens_total=Counter(
            "gamma_model_shared_prefix_tokens", "Shared-prefix tokens sent, summed (cacheable)", ["model"],
            registry=registry,
        ),
        model_completion_tokens_total=Counter(
            "gamma_model_completion_tokens", "Completion tokens received, summed", ["model"], registry=registry,
        ),
        model_input_tokens_total=Counter(
            "gamma_model_input_tokens", "Input tokens the API reported, summed", ["model", "api"], registry=registry,
        ),
        model_cached_tokens_total=Counter(
            "gamma_model_cached_tokens", "Input tokens the API served from its prompt cache, summed",
            ["model", "api"], registry=registry,
        ),
        model_reasoning_tokens_total=Counter(
            "gamma_model_reasoning_tokens", "Output tokens spent on reasoning, summed", ["model", "api"],
            registry=registry,
        ),
        active_leases=Gauge("gamma_active_leases", "Session leases this worker holds", registry=registry),
        deadletters=Counter(
            "gamma_deadletter", "Entries this service moved to gamma:deadletter", registry=registry,
        ),
        stream_delivery=Histogram(
            "gamma_stream_delivery_seconds", "From an entry's XADD to its handler returning, per stream and group",
            ["stream", "group"], buckets=LATENCY_BUCKETS, registry=registry,
        ),
    )
    _BY_REGISTRY[registry] = m
    return m


def injection_delivered(registry: CollectorRegistry, kind: str, source: str = "system", n: int = 1) -> None:
    """Call when an injection reached the session (its transcript entry is durable)."""
    for_registry(registry).injections_delivered.labels(kind=kind, source=source).inc(n)


_DISK: weakref.WeakKeyDictionary[CollectorRegistry, tuple[Gauge, Gauge, Gauge]] = weakref.WeakKeyDictionary()


def session_disk(registry: CollectorRegistry, state: str, free_bytes: int | None, free_inodes: int | None,
                 states: Iterable[str]) -> None:
    """Call after each probe of the session disk (shared/serving/diskhealth.py): free bytes and inodes (left
    as they were when the probe could not read them) and a 1 for the state it is in. Created on first
    use: only the services that use the disk export them."""
    gauges = _DISK.get(registry)
    if gauges is None:
        gauges = (
            Gauge("gamma_session_disk_free_bytes", "Bytes free for this service on the session disk (statvfs f_bavail)",
                  registry=registry),
            Gauge("gamma_session_disk_free_inodes", "Inodes free on the session disk (statvfs f_favail)",
                  registry=registry),
            Gauge("gamma_session_disk_state", "1 for the session disk's state: ok, full, read_only or io_error",
                  ["state"], registry=registry),
        )
        _DISK[registry] = gauges
    free, inodes, by_state = gauges
    if free_bytes is not None:
        free.set(free_bytes)
    if free_inodes is not None:
        inodes.set(free_inodes)
    for name in states:
        by_state.labels(state=name).set(1 if name == state else 0)


def observe_wake(registry: CollectorRegistry, wake_published_ms: int, now_ms: int | None = None) -> float:
    """Call when the session is live; `wake_published_ms` is the Wake entry's time (see `entry_ms`)."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    seconds = max(0.0, (now_ms - wake_published_ms) / 1000)
    for_registry(registry).wake_latency.observe(seconds)
    return seconds


def entry_ms(entry_id: str | bytes | None = None) -> int | None:
    """The millisecond time in a stream entry id (`1733150000000-0`). Without an argument, the entry
    being handled now (`shared.streams.bus.subscribe` binds `entry_id` in structlog's context)."""
    if entry_id is None:
        entry_id = structlog.contextvars.get_contextvars().get("entry_id")
    return id_ms(entry_id)


def model_request(
    registry: CollectorRegistry,
    *,
    prompt_tokens: int,
    shared_prefix_tokens: int,
    completion_tokens: int = 0,
    model: str = "",
    input_tokens: int = 0,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    api: str = "",
) -> None:
    """Call once per model request (the runtime's `model_request` event carries the same numbers)."""
    m = for_registry(registry)
    m.model_requests.labels(model=model).inc()
    m.model_prompt_tokens.observe(prompt_tokens)
    m.model_shared_prefix_tokens.observe(shared_prefix_tokens)
    m.model_prompt_tokens_total.labels(model=model).inc(prompt_tokens)
    m.model_shared_prefix_tokens_total.labels(model=model).inc(shared_prefix_tokens)
    if completion_tokens:
        m.model_completion_tokens_total.labels(model=model).inc(completion_tokens)
    # Created with the first request, so the cache-hit ratio (cached / input) is always computable.
    m.model_input_tokens_total.labels(model=model, api=api).inc(input_tokens)
    m.model_cached_tokens_total.labels(model=model, api=api).inc(cached_tokens)
    m.model_reasoning_tokens_total.labels(model=model, api=api).inc(reasoning_tokens)


def track_active_leases(registry: CollectorRegistry, count: Callable[[], float]) -> None:
    """The runtime passes e.g. `lambda: len(worker.sessions)`; read at every scrape."""
    m = for_registry(registry)
    m.leases_tracked = True
    m.active_leases.set_function(count)


# --- reported by the bus's subscriptions (shared/streams/bus_subscriber.py) ----------------------------


def observe_handled(registry: CollectorRegistry | None, stream: str, group: str, entry_id: str,
                    now_ms: int | None = None) -> None:
    """An entry's handler returned: its end-to-end delivery time; for `gamma:runtime:wake` that is
    the wake latency (the runtime's handler returns once the session is live)."""
    published = entry_ms(entry_id)
    if registry is None or published is None:
        return
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    seconds = max(0.0, (now_ms - published) / 1000)
    m = for_registry(registry)
    m.stream_delivery.labels(stream=stream, group=group).observe(seconds)
    if stream == keys.WAKE:
        m.wake_latency.observe(seconds)


def deadletter_counter(registry: CollectorRegistry) -> Counter:
    """Pass as `shared.streams.bus.subscribe(..., deadletters=deadletter_counter(ctx.registry))`."""
    return for_registry(registry).deadletters


def dead_lettered(registry: CollectorRegistry, n: int = 1) -> None:
    for_registry(registry).deadletters.inc(n)


# --- scrape-time stream statistics --------------------------------------------------------------


@dataclass
class GroupStats:
    stream: str
    group: str
    lag: int | None  # None when Redis cannot tell (entries deleted under the group)
    pending: int
    consumers: int


def _field(info: dict[Any, Any], name: str) -> Any:
    return info.get(name, info.get(name.encode()))


class StreamStats(Collector):
    """XINFO GROUPS on the streams a service consumes, refreshed right before each scrape.

    prometheus_client calls `collect()` synchronously, and our Redis client is async, so the
    /metrics route awaits `refresh()` first and `collect()` reports that snapshot.
    """

    def __init__(self, client: aioredis.Redis, service: str, streams: Iterable[str] | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.client = client
        self.service = service
        self.registry = registry
        self.group = topology.group_of(service)
        # The per-session inboxes are too many to XINFO at every scrape; their backlog shows up as
        # wake latency and lease counts.
        self.streams = tuple(streams if streams is not None else topology.consumed_streams(service))
        self.groups: list[GroupStats] = []
        self.deadletter_length: int | None = None
        self.refreshed_at = 0.0
        self.errors = 0

    async def refresh(self) -> None:
        groups: list[GroupStats] = []
        try:
            for stream in self.streams:
                try:
                    infos = await self.client.xinfo_groups(stream)
                except aioredis.ResponseError:  # no such stream yet
                    continue
                for info in infos:
                    name = text(_field(info, "name"))
                    if name != self.group:
                        continue
                    lag = _field(info, "lag")
                    groups.append(GroupStats(
                        stream=stream, group=name, lag=None if lag is None else int(lag),
                        pending=int(_field(info, "pending") or 0), consumers=int(_field(info, "consumers") or 0),
                    ))
            self.deadletter_length = int(await self.client.xlen(keys.DEADLETTER))
            self.groups = groups
            if self.service == "runtime" and self.registry is not None and not for_registry(self.registry).leases_tracked:
                for_registry(self.registry).active_leases.set(await self.leases_held())
            self.refreshed_at = time.time()
        except Exception:  # noqa: BLE001 - a scrape must answer even when Redis does not
            self.errors += 1

    async def leases_held(self) -> int:
        """Leases whose value names this worker (`{worker_id}:{fence}`): one SCAN per scrape, used only
        while the runtime does not report its own count (`track_active_leases`)."""
        prefix = topology.consumer_name("runtime") + ":"
        keys_found = [k async for k in self.client.scan_iter(match="gamma:{*}:lease", count=1000)]
        if not keys_found:
            return 0
        values = await redis_cluster.mget(self.client, keys_found)  # one slot per session
        return sum(1 for v in values if v is not None and text(v).startswith(prefix))

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        lag = GaugeMetricFamily("gamma_stream_group_lag", "Entries not yet delivered to the group", labels=["stream", "group"])
        pending = GaugeMetricFamily(
            "gamma_stream_group_pending", "Entries delivered to the group and not yet acknowledged", labels=["stream", "group"]
        )
        consumers = GaugeMetricFamily("gamma_stream_group_consumers", "Consumers in the group", labels=["stream", "group"])
        for g in self.groups:
            if g.lag is not None:
                lag.add_metric([g.stream, g.group], g.lag)
            pending.add_metric([g.stream, g.group], g.pending)
            consumers.add_metric([g.stream, g.group], g.consumers)
        yield lag
        yield pending
        yield consumers
        deadletter = GaugeMetricFamily("gamma_deadletter_entries", "Entries in gamma:deadletter (all services)")
        if self.deadletter_length is not None:
            deadletter.add_metric([], self.deadletter_length)
        yield deadletter
        errors = GaugeMetricFamily("gamma_stream_stats_errors", "Scrapes whose Redis read failed")
        errors.add_metric([], self.errors)
        yield errors
        yield CounterMetricFamily(
            "gamma_redis_writes_unconfirmed",
            "Acknowledged writes no replica confirmed within GAMMA_REDIS_WAIT_MS (a failover can lose them), "
            "this process", value=replicas.Unconfirmed.count)


def install_stream_stats(registry: CollectorRegistry, client: aioredis.Redis, service: str) -> StreamStats:
    stats = StreamStats(client, service, registry=registry)
    registry.register(stats)
    return stats
