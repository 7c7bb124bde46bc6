"""The loop-lag probe and percentile helpers of bench/history.py: a 5 ms sleep's overshoot sampled
on the event loop the sessions share, each sample filed under the phase running when it was taken."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1) if ordered else 0.0


def dist(values: list[float]) -> dict[str, float]:
    return {"p50": pct(values, 0.5), "p99": pct(values, 0.99), "max": pct(values, 1.0)}


class LagProbe:
    """The event loop's lag (a 5 ms sleep's overshoot: what a neighbour's next step waits), each sample
    filed under the phase running when it was taken (`phase`), so rounds of two sessions interleaved
    on the same loaded worker are told apart."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}
        self.current = ""

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            t, at = time.perf_counter(), self.current
            await asyncio.sleep(0.005)
            self.samples.setdefault(at, []).append(time.perf_counter() - t - 0.005)

    def of(self, *phases: str) -> dict[str, float]:
        return dist([v for p in phases for v in self.samples.get(p, [])])


@contextlib.contextmanager
def phase(probe: LagProbe | None, name: str) -> Iterator[None]:
    if probe is None:
        yield
        return
    before, probe.current = probe.current, name
    try:
        yield
    finally:
        probe.current = before


async def lag_during(work: Any) -> tuple[Any, dict[str, float]]:
    """The event loop's lag while `work` runs."""
    probe, stop = LagProbe(), asyncio.Event()
    task = asyncio.ensure_future(probe.run(stop))
    try:
        result = await work
    finally:
        stop.set()
        await task
    return result, probe.of("")
