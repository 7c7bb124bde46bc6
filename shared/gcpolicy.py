"""The cyclic GC's full collections off the streaming path (docs/architecture.md "Streaming at scale").

`settle_heap` freezes what startup allocated, but the sessions' own long-lived state (transcripts,
models, Outboxes: 100-200 streaming sessions) was scanned in full by every gen-2 collection, which
CPython runs each time the long-lived heap grows by a quarter: bench-stream's GC probe saw the
runtime's loop stop for 39-81 ms of CPU inside a 7-s stream at 100 sessions (60-117 ms during the
wake-up), every session's tokens held at once: the added latency's worst 1%.

Here, every `freeze_s`, the young generations are collected (cheap: only what is new) and what
survived is frozen, so an automatic gen-2 collection scans only what was promoted since. Cyclic
garbage among frozen objects is not collected until the next full pass: every `full_s`, or sooner
once the frozen heap grew by `full_growth` since the last pass (`full_pass_due`), the heap is
unfrozen and collected once (a full collection's pause), then frozen again. Refcounted
garbage, the bulk, is freed at once, as always.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import time
from collections.abc import Callable


def young_threshold(gen0: int) -> None:
    """Allocations (net of frees) between two young collections (`GAMMA_GC_GEN0`, CPython's 700 by
    default). A young collection scans what was allocated since the last one and is still alive, and
    promotes it: at 700 the streaming path's short-lived objects (a token's parsed event, a tick's
    entries, asyncio's handles) are scanned every few ticks, the collector's own functions ~4% of the
    runtime's CPU with 200 sessions streaming (perf, bench/results/stream.md "Session 11"); at 20,000
    that went, within the noise of whole runs, while the proxy's cyclic garbage around a large
    response (a 20 MB preview) lived longer. Generations 1 and 2 keep CPython's ratios (10 young
    collections a gen-1 one; gen 2 as `heap_freezer` leaves it)."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0, gen1, gen2)


def freeze_young() -> None:
    gc.collect(1)  # generations 0 and 1: cycles among recent objects go now, not after the next full pass
    gc.freeze()


def full_pass(trim: bool = False) -> None:
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    if trim:
        malloc_trim()


def _libc_trim() -> Callable[[int], int] | None:
    with contextlib.suppress(OSError, AttributeError):
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
        return trim
    return None  # not glibc


_trim = _libc_trim()


def malloc_trim() -> bool:
    """Hands the free pages inside malloc's heaps back to the OS (glibc's `malloc_trim(0)`: not only
    the heap's top). What a full pass freed (closed sessions' state) leaves holes between the live
    sessions' blocks that malloc keeps mapped: the runtime's RSS ratcheted up with the waves of
    sessions closing and waking while no object count grew (README "Soak"). False without glibc."""
    if _trim is None:
        return False
    _trim(0)
    return True


_released = 0  # long-lived states let go since the last full pass: process-wide, as the collector is


def released(n: int = 1) -> None:
    """A long-lived state was let go (the runtime: a session closed or dropped). Its parts call back
    into one another, so it is cyclic garbage, and it was frozen while it was live: only a full pass
    frees it. Counted so that a pass follows a wave of closes (`full_pass_due`)."""
    global _released
    _released += n


def full_pass_due(elapsed_s: float, full_s: float, frozen: int, frozen_after_full: int, growth: float,
                  released_since: int = 0, full_released: int = 0) -> bool:
    """Every `full_s`, once the frozen heap outgrew what the last full pass left by `growth`, or once
    `full_released` (> 0) long-lived states were let go since it. Sessions that went dormant leave
    their state behind as frozen cycles; under churn the next timed pass would be minutes of sessions
    away (the soak, bench/soak.py: +26 MB a minute in the runtime until it), and sessions closed while
    as many others open leave the frozen heap's size flat, so its growth alone misses them (+16 MB for
    a wave of 50 closes and 50 wakes, bench/results/soak.inbox-rss.md). Growth of the live heap (a
    wake-up of many sessions) triggers a pass too, as CPython's own gen-2 rule would."""
    return (elapsed_s >= full_s or frozen > frozen_after_full * (1 + growth)
            or 0 < full_released <= released_since)


async def heap_freezer(freeze_s: float, full_s: float, full_growth: float = 0.25, full_released: int = 0,
                       trim: bool = False) -> None:
    """Runs for the service's life (ServiceContext.spawn); `freeze_s` <= 0: off. `trim`: `malloc_trim`
    after each full pass."""
    global _released
    if freeze_s <= 0:
        return
    last_full, after_full = time.monotonic(), gc.get_freeze_count()
    while True:
        await asyncio.sleep(freeze_s)
        if full_pass_due(time.monotonic() - last_full, full_s, gc.get_freeze_count(), after_full, full_growth,
                         _released, full_released):
            full_pass(trim)
            last_full, after_full, _released = time.monotonic(), gc.get_freeze_count(), 0
        else:
            freeze_young()
