"""Jobs for tests and benchmarks of shared/pools/offload.py: where it ran, and a job that never ends."""

from __future__ import annotations

import os
import time


def pid() -> int:
    return os.getpid()


def spin(seconds: float) -> int:
    """Busy for `seconds` of CPU (a stand-in for a decode that will not end)."""
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += 1
    return n


def allocate(n: int) -> int:
    return len(bytearray(n))
