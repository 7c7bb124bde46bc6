"""A runtime worker's model-call machinery, shared by its sessions (docs/architecture.md "Model calls:
retries and recovery"): the limits of every call, the providers' rate gates and breakers, the
Prometheus counters; and a session's record of a history repair (a transcript entry)."""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog
from openai import AsyncOpenAI
from prometheus_client import CollectorRegistry, Counter

from services.runtime.model.attempts import QUIET, CallLimits, CallObserver, HistoryRepair
from services.runtime.model.cache_watch import MissReport, PrefixLedger
from services.runtime.model.provider_gate import Provider, ProviderGates, provider_key
from services.runtime.model.retry_policy import Failure
from services.runtime.store.transcript import Transcript, now_iso
from shared.contracts.records.transcript import HistoryRepairEntry
from shared.history.context import context_with_ids
from shared.settings import Settings

_METRICS: dict[CollectorRegistry, ModelMetrics] = {}
log = structlog.get_logger()


class ModelMetrics:
    """The runtime's model call counters (one set per registry: sessions come and go)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.errors = Counter("gamma_model_errors", "Failed model call attempts, by HTTP status and error code "
                              "(status 0: none, e.g. a dropped or idle stream)", ["status", "code"], registry=registry)
        self.retries = Counter("gamma_model_retries", "Model call attempts retried, by reason (code or status)",
                               ["reason"], registry=registry)
        self.finishes = Counter("gamma_model_finish", "Model calls ended, by stop reason", ["reason"],
                                registry=registry)
        self.waits = Counter("gamma_model_wait_seconds", "Time model calls spent waiting before an attempt, by "
                             "cause (backoff: between retries; limiter: the provider's rate gate or concurrency bound)",
                             ["cause"], registry=registry)
        # docs/cache.md "When the cache breaks"; the alert: deploy/prometheus/gamma-alerts.yaml
        self.cache_misses = Counter("gamma_model_cache_miss_tokens", "Prompt tokens the harness expected the "
                                    "API to read from its cache and it did not, by model family, variant and "
                                    "where the prefix diverged", ["family", "variant", "reason"], registry=registry)
        self.repairs = Counter("gamma_model_history_repairs", "Replayed histories repaired after the model API "
                               "refused an item, by action", ["action"], registry=registry)

    @classmethod
    def of(cls, registry: CollectorRegistry) -> ModelMetrics:
        if registry not in _METRICS:
            _METRICS[registry] = cls(registry)
        return _METRICS[registry]

    def error(self, failure: Failure) -> None:
        self.errors.labels(status=str(failure.status or 0), code=(failure.code or "none")[:64]).inc()

    def retry(self, reason: str) -> None:
        self.retries.labels(reason=reason[:64]).inc()

    def waited(self, cause: str, seconds: float) -> None:
        self.waits.labels(cause=cause).inc(max(0.0, seconds))

    def repair(self, action: str) -> None:
        self.repairs.labels(action=action).inc()

    def finish(self, reason: str) -> None:
        self.finishes.labels(reason=reason).inc()


@dataclass
class ModelCalls:
    limits: CallLimits = field(default_factory=CallLimits)
    gates: ProviderGates = field(default_factory=ProviderGates)
    observer: CallObserver = QUIET
    ledger: PrefixLedger = field(default_factory=PrefixLedger)  # the last request per cache key (cache_watch.py)
    metrics: ModelMetrics | None = None

    @classmethod
    def of(cls, settings: Settings, registry: CollectorRegistry | None) -> ModelCalls:
        m = settings.models
        metrics = ModelMetrics.of(registry) if registry is not None else None
        return cls(CallLimits(m.model_retry_jitter, m.model_stream_idle_s, m.model_call_deadline_s),
                   ProviderGates(m.model_breaker_threshold, m.model_breaker_cooldown_s, m.model_max_concurrent),
                   metrics or QUIET, metrics=metrics)

    def cache_miss(self, r: MissReport) -> None:
        """A cache break (model/cache_watch.py): counted, and logged with the request it happened to."""
        if self.metrics is not None:
            self.metrics.cache_misses.labels(family=r.family, variant=r.variant, reason=r.miss.reason).inc(
                r.miss.tokens)
        log.warning("model_cache_miss", session_id=r.session, request=r.request, prefix_sha256=r.prefix_sha256,
                    family=r.family, variant=r.variant, diverged=r.miss.reason, expected_cached=r.miss.expected,
                    cached=r.miss.cached, missed=r.miss.tokens)

    def provider(self, client: AsyncOpenAI) -> Provider:
        return self.gates.of(provider_key(str(client.base_url), client.api_key))


async def record_repair(transcript: Transcript, fix: HistoryRepair) -> HistoryRepairEntry:
    """The repair as a transcript entry: every later replay (the next turns, a wake, compaction) applies
    it. The repaired messages are found in the transcript's context by identity, else by value."""
    targets: list[str] = []
    if not fix.everything:
        pairs = context_with_ids(transcript.entries)
        for m in fix.messages:
            found = next((i for i, c in pairs if c is m), None) or next((i for i, c in pairs if c == m), None)
            if found is not None:
                targets.append(found)
    entry = HistoryRepairEntry(id=transcript.new_id(), parent_id=transcript.leaf_id, timestamp=now_iso(),
                               action=fix.action, target_ids=targets, error=fix.error[:2000])
    if not fix.everything and not targets:
        return entry  # not a transcript message (a subagent's, or not recorded yet): the live repair is all
    await transcript.append_entry(entry)
    return entry
