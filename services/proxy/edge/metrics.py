"""Proxy metrics on the service registry (served at /metrics by shared.serving.service)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram


@dataclass
class ProxyMetrics:
    wakes: Counter
    forwards: Counter
    forward_seconds: Histogram
    dormant_writes: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ProxyMetrics:
        return cls(
            wakes=Counter("gamma_proxy_wakes_total", "Wakes sent for a message to a dormant session", registry=registry),
            forwards=Counter("gamma_proxy_forwards_total", "Live writes forwarded to the runtime, by message type and outcome",
                             ["type", "outcome"], registry=registry),
            forward_seconds=Histogram("gamma_proxy_forward_seconds", "Inbox append to runtime reply (read-your-writes)",
                                      ["type"], registry=registry,
                                      buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)),
            dormant_writes=Counter("gamma_proxy_dormant_writes_total", "Writes the proxy made to a dormant session disk",
                                   ["kind"], registry=registry),
        )
