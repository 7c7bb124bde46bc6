"""Bench-only stall probe (docs/architecture.md "Streaming at scale"): `PYTHONPATH=bench/probe:$PWD python bench/stream.py ...`.

Every Python process started with this directory on its path (the services, the scripted model
server, the bench's readers) appends to /tmp/gamma-probe/<pid>.log: each cyclic-GC collection of 5 ms
or more (wall and this thread's CPU time: a descheduled process shows wall >> CPU), and each time a
thread's 10 ms sleep overshoots by 20 ms or more (the process was descheduled). bench-stream's hop
split says when every session's tokens stalled at once; this says whether the collector did it.
GAMMA_PROBE_GC_THRESHOLD="a,b,c" sets gc.set_threshold in every process, to try thresholds.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

OUT = Path(os.environ.get("GAMMA_PROBE_DIR", "/tmp/gamma-probe"))
_started = [0.0, 0.0]


def _cmdline() -> str:
    try:
        return Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode()[-80:]
    except OSError:
        return "?"


def _log(line: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / f"{os.getpid()}.log").open("a") as f:
        f.write(f"{time.time():.3f} {line} | {_cmdline()}\n")


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0], _started[1] = time.perf_counter(), time.thread_time()
        return
    wall, cpu = time.perf_counter() - _started[0], time.thread_time() - _started[1]
    if wall >= 0.005:
        _log(f"gc gen{info['generation']} {wall * 1000:.1f}ms cpu={cpu * 1000:.1f}ms collected={info['collected']}")


def _watch() -> None:
    while True:
        t = time.perf_counter()
        time.sleep(0.01)
        over = time.perf_counter() - t - 0.01
        if over >= 0.02:
            _log(f"sleep overshoot {over * 1000:.1f}ms")


gc.callbacks.append(_on_gc)
threading.Thread(target=_watch, daemon=True, name="gamma-probe").start()
if threshold := os.environ.get("GAMMA_PROBE_GC_THRESHOLD"):
    gc.set_threshold(*(int(x) for x in threshold.split(",")))
