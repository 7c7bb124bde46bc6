"""Prometheus counters of what the model requests cost (docs/costs.md "Where it shows"), on the runtime's
registry: `gamma_model_cost_usd_total` and `gamma_model_usage_tokens_total`.

Labels are bounded: the model's catalogue family (never the name a session chose: any unknown name
is `unknown`), the kind (agent, subagent, compaction), the attempt (ok, failed, aborted) and, for
tokens, the type. Never a user or session id: per-user totals are in Redis (`GET /spend`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from shared.contracts.records.spend import UsageRow

LABELS = ["family", "kind", "attempt"]


@dataclass
class SpendCounters:
    usd: Counter
    tokens: Counter
    unpriced: Counter


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, SpendCounters] = weakref.WeakKeyDictionary()


def counters(registry: CollectorRegistry) -> SpendCounters:
    found = _BY_REGISTRY.get(registry)
    if found is None:
        found = SpendCounters(
            usd=Counter("gamma_model_cost_usd", "What model requests cost in US dollars, by the catalogue's prices",
                        LABELS, registry=registry),
            tokens=Counter("gamma_model_usage_tokens", "Tokens of every model request (agent, subagents, compaction, "
                           "failed and aborted attempts), by type: fresh input, cached, cache_write, output",
                           [*LABELS, "type"], registry=registry),
            unpriced=Counter("gamma_model_unpriced_requests", "Model requests of a model with no price",
                             LABELS, registry=registry))
        _BY_REGISTRY[registry] = found
    return found


def record(registry: CollectorRegistry, family: str, row: UsageRow, nanos: int | None) -> None:
    c = counters(registry)
    labels = {"family": family, "kind": row.kind, "attempt": row.attempt}
    if nanos is None:
        c.unpriced.labels(**labels).inc()
    else:
        c.usd.labels(**labels).inc(nanos / 1_000_000_000)
    fresh = max(row.input_tokens - row.cached_tokens - row.cache_write_tokens, 0)
    for kind, n in (("input", fresh), ("cached", row.cached_tokens), ("cache_write", row.cache_write_tokens),
                    ("output", row.output_tokens)):
        c.tokens.labels(**labels, type=kind).inc(n)
