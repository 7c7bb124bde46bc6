"""A thread that asks a service's /healthz every `interval_s` and keeps each answer's latency: whether
anything holds the service's event loop (a disk wait on the loop shows as a slow /healthz)."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field

import httpx


@dataclass
class HealthzMonitor:
    url: str
    interval_s: float = 0.1
    timeout_s: float = 5.0
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> HealthzMonitor:
        self._thread = threading.Thread(target=self._run, daemon=True, name="healthz-monitor")
        self._thread.start()
        return self

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout_s) as http:
            while not self._stop.is_set():
                began = time.perf_counter()
                try:
                    ok = http.get(self.url).status_code == 200
                    if not ok:
                        self.failures.append("not 200")
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                self.latencies_ms.append((time.perf_counter() - began) * 1000)
                self._stop.wait(self.interval_s)

    def stop(self) -> HealthzMonitor:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)
        return self

    def summary(self) -> dict[str, float]:
        xs = sorted(self.latencies_ms) or [0.0]
        return {"probes": len(self.latencies_ms), "p50_ms": round(statistics.median(xs), 1),
                "p99_ms": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 1), "max_ms": round(xs[-1], 1),
                "over_50ms": sum(1 for x in xs if x > 50)}
