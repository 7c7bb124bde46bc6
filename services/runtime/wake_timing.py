"""Where a wake's time goes: entry read -> lease -> disk claim -> restore -> SessionLive -> reader.

Logged with `session_live` (worker.py) so a bench (bench/wake_load.py) and an operator read the
wake's own latency, split by step, without a tracer: a wake that waits behind a busy event loop
shows it in the step that was running when the loop was held.
"""

from __future__ import annotations

import time


class WakeClock:
    """Milliseconds from the wake's entry (its read from `gamma:runtime:wake`) to each step's end."""

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._last = self._start
        self.steps: dict[str, float] = {}

    def mark(self, step: str) -> None:
        """The step just ended: its own duration (from the previous mark) is kept under `step`."""
        now = time.monotonic()
        self.steps[step] = round((now - self._last) * 1000, 1)
        self._last = now

    def fields(self) -> dict[str, float]:
        """`wake_ms` (entry to now) and `<step>_ms` per marked step, for the log line."""
        return {"wake_ms": round((time.monotonic() - self._start) * 1000, 1),
                **{f"{step}_ms": ms for step, ms in self.steps.items()}}
