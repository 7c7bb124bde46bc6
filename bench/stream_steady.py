"""bench-stream's steady window: the CPU per chunk of each process while every session streams
(docs/architecture.md "Streaming at scale").

bench-stream's phase figures divide all CPU of the streaming phase by its chunks, so they also carry
each turn's start and end (the model request, snapshots, transcript appends, cost records: per prompt,
not per chunk). Sampled here every 100 ms, the window between the last prompt's first token and the
first stream's possible end has the chunks' own cost; docs/capacity.md uses both.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import psutil


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


STEADY_MARGIN_S = 0.5


async def sample_cpu(pids: dict[str, int], out: list[tuple[float, dict[str, float]]]) -> None:
    """(wall time, CPU seconds per process) every 100 ms while streaming, for steady_window."""
    while True:
        row: dict[str, float] = {}
        for name, pid in pids.items():
            with contextlib.suppress(psutil.Error):
                row[name] = cpu_s(pid)
        out.append((time.time(), row))
        await asyncio.sleep(0.1)


def steady_window(samples: list[tuple[float, dict[str, float]]], hops: list[tuple[float, float, float, float]],
                  spans: list[float]) -> dict[str, Any] | None:
    """CPU per chunk while every session streams: from the last session's first streamed text to the
    first session's end (XADD times, `spans` = first, last per session, flat), less a margin at each
    end. Chunks counted by their XADD time (the entry id), CPU between the samples nearest the window's
    ends. None when the sessions' streams did not overlap for a second (a worker far behind)."""
    if not spans:
        return None
    start = max(spans[0::2]) + STEADY_MARGIN_S
    end = min(spans[1::2]) - STEADY_MARGIN_S
    inside = [(t, row) for t, row in samples if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < 1.0:
        return None
    (t0, a), (t1, b) = inside[0], inside[-1]
    chunks = sum(1 for _, _, xadd, _ in hops if t0 <= xadd < t1)
    if not chunks:
        return None
    per_chunk = {name: round((b[name] - a[name]) * 1e6 / chunks, 1) for name in a if name in b}
    readers = sum(v for k, v in per_chunk.items() if k.startswith("reader"))
    return {"window_s": round(t1 - t0, 2), "chunks": chunks, "chunks_per_s": round(chunks / (t1 - t0), 1),
            "cpu_us_per_chunk": {**{k: v for k, v in per_chunk.items() if not k.startswith("reader")},
                                 "sse_readers": round(readers, 1)}}
