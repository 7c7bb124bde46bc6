"""The benchmark tuning knobs among the settings (docs/operations.md "Tuning"): fields that trade CPU, memory
or latency under load and were set by a benchmark, not by a deployment's shape. They stay ordinary settings
(same variables, same areas); only the documentation lists them apart from the deployment settings, in their
own table, so an operator reads the ~115 settings a deployment decides and leaves these at their defaults."""

from __future__ import annotations

TUNING: dict[str, frozenset[str]] = {
    "bus": frozenset({"digest_debounce_ms"}),
    "server": frozenset({"trace_inbox", "gc_freeze_s", "gc_full_s", "gc_full_growth", "gc_full_defer_s", "gc_gen0",
                         "gc_full_released", "gc_malloc_trim", "heap_census", "heap_census_s", "io_threads"}),
    "models": frozenset({"model_http", "model_max_connections"}),
    "runtime": frozenset({"runtime_wakes_at_once", "runtime_wakes_per_read", "redis_warm_connections",
                          "delta_coalesce_ms", "delta_coalesce_min_ms", "delta_sends_per_s", "turn_starts_at_once",
                          "turn_start_max_wait_ms"}),
}


def is_tuning(area: str, field: str) -> bool:
    return field in TUNING.get(area, frozenset())


def is_deployment(area: str, field: str) -> bool:
    return not is_tuning(area, field)
