"""The cyclic GC's full collections off the streaming path (docs/architecture.md "Streaming at scale").

`settle_heap` (shared/serving/service.py) freezes what startup allocated: modules, classes, pydantic
schemas, ~220k objects in the runtime that live until exit and cost a collection ~150-180 ms of CPU to
walk (functions and types are costly to traverse). They stay frozen for good: no collection here
walks them again.

CPython would also run a gen-2 collection each time the long-lived heap grows by a quarter, scanning
the sessions' own state (transcripts, models, Outboxes): bench-stream's GC probe saw the runtime's
loop stop for 39-81 ms of CPU inside a 7-s stream at 100 sessions, every session's tokens held at
once. While the freezer runs, those automatic gen-2 collections are off (`MANAGED_GEN2`: the young
generations 0 and 1 are collected as always, and at each of its looks) and the freezer runs gen 2's itself: every `full_s`,
sooner once the heap grew by `full_growth` since the last pass (pymalloc's allocated blocks: O(1) to
read), or once `full_released` long-lived states (closed sessions) were let go (`full_pass_due`).
A pass (`full_pass`) is `gc.collect(2)`: every generation but the frozen one, so it walks what
sessions added since startup and never the startup heap. Refcounted garbage, the bulk, is freed at
once, as always.

Before, survivors were frozen every few seconds and each pass unfroze the whole heap, startup's
included: every pass paid the startup heap again (a pass in an idle service: 160-180 ms of CPU,
230-1,150 ms of pause on the shared 2-core machine; in bench-stalls a pass falling in one phase was
that phase's p99: docs/operations.md "Observability" logs each pass).

A pass holds the event loop for as long as it scans: a process can say when such a pause costs most
(`defer_while`: the runtime, while model streams are read): a pass that falls due then waits until
that ends, at most `defer_s`, so a wave of turns does not pay it mid-stream; one that keeps streaming
pays it `defer_s` late: the heap's bound grows by what `defer_s` of allocations add.

Anything else that called `gc.freeze()` would move the sessions' state out of every pass's reach for
good: nothing does (the heap census counts what is not frozen; a transcript scan's child runs with the
cyclic GC off instead, shared/history/scan_apart.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import sys
import time
from collections.abc import Callable

import structlog

DEFER_POLL_S = 0.25  # how often a deferred pass looks again whether the busy spell ended


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


MANAGED_GEN2 = 2**31 - 1  # gen 2's threshold while the freezer runs: CPython never picks it itself


def heap_size() -> int:
    """The heap's size for `full_pass_due`: pymalloc's allocated blocks (every small object, tracked
    by the collector or not), a counter to read. Walking gen 2 to count its objects stops the loop
    ~27 ms per million of them, each time."""
    return sys.getallocatedblocks()


def full_pass(trim: bool = False) -> None:
    """Every generation but the frozen one (startup's heap, shared/serving/service.py `settle_heap`)."""
    gc.collect(2)
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
    sessions closing and waking while no object count grew (docs/operations.md "Network faults to Redis, and the soak"). False without glibc."""
    if _trim is None:
        return False
    _trim(0)
    return True


_released = 0  # long-lived states let go since the last full pass: process-wide, as the collector is


def released(n: int = 1) -> None:
    """A long-lived state was let go (the runtime: a session closed or dropped). Its parts call back
    into one another, so it is cyclic garbage, and it had reached gen 2 while it was live: only a full pass
    frees it. Counted so that a pass follows a wave of closes (`full_pass_due`)."""
    global _released
    _released += n


def full_pass_due(elapsed_s: float, full_s: float, heap: int, heap_after_full: int, growth: float,
                  released_since: int = 0, full_released: int = 0) -> bool:
    """Every `full_s`, once the heap outgrew what the last full pass left by `growth`, or once
    `full_released` (> 0) long-lived states were let go since it. Sessions that went dormant leave
    their state behind as cycles in gen 2; under churn the next timed pass would be minutes of sessions
    away (the soak, bench/soak.py: +26 MB a minute in the runtime until it), and sessions closed while
    as many others open leave the heap's size flat, so its growth alone misses them (+16 MB for
    a wave of 50 closes and 50 wakes in a one-off 7-minute soak). Growth of the live heap (a
    wake-up of many sessions) triggers a pass too, as CPython's own gen-2 rule would."""
    return (elapsed_s >= full_s or heap > heap_after_full * (1 + growth)
            or 0 < full_released <= released_since)


_busy: Callable[[], bool] | None = None  # the process's own "a pause now costs most" (defer_while)


def defer_while(busy: Callable[[], bool] | None) -> None:
    """Full passes that fall due while `busy()` is true wait until it is false (at most the freezer's
    `defer_s`); None: never (the default). Process-wide, as the collector is."""
    global _busy
    _busy = busy


def deferred(waited_s: float, defer_s: float) -> bool:
    """A due full pass waits: the process is busy and the pass has waited less than `defer_s`."""
    return waited_s < defer_s and _busy is not None and _busy()


async def heap_freezer(freeze_s: float, full_s: float, full_growth: float = 0.25, full_released: int = 0,
                       defer_s: float = 0.0, trim: bool = False) -> None:
    """Runs for the service's life (ServiceContext.spawn); `freeze_s` <= 0: off (CPython's own gen-2
    rule then). Looks every `freeze_s` whether a full pass is due; a due one waits up to `defer_s` for
    the end of a busy spell (`defer_while`), looking every DEFER_POLL_S. `trim`: `malloc_trim` after
    each pass."""
    if freeze_s <= 0:
        return
    young, old, auto = gc.get_threshold()
    gc.set_threshold(young, old, MANAGED_GEN2)
    try:
        await _passes(freeze_s, full_s, full_growth, full_released, defer_s, trim)
    finally:
        gc.set_threshold(*gc.get_threshold()[:2], auto)


async def _passes(every_s: float, full_s: float, full_growth: float, full_released: int,
                  defer_s: float, trim: bool) -> None:
    global _released
    last_full, after_full = time.monotonic(), heap_size()
    due_at: float | None = None  # when the pass fell due (it waits while the process is busy)
    while True:
        await asyncio.sleep(every_s if due_at is None else min(every_s, DEFER_POLL_S))
        now = time.monotonic()
        if due_at is None and full_pass_due(now - last_full, full_s, heap_size(), after_full, full_growth,
                                            _released, full_released):
            due_at = now
        if due_at is None or deferred(now - due_at, defer_s):
            # The young generations now, however few allocations came: in an idle process a cycle
            # among recent objects (an exception's traceback holding an open file) would otherwise wait
            # for 700 more, its file open meanwhile (a read-only remount refused while one is).
            gc.collect(1)
            continue
        before, cpu = heap_size(), time.thread_time()
        full_pass(trim)
        last_full, cpu, after_full = time.monotonic(), time.thread_time() - cpu, heap_size()
        # The pass held the loop for `pause_ms` (`cpu_ms` of it running): logged so that a latency
        # spike can be matched to it (each service's log, docs/operations.md "Observability").
        structlog.get_logger().info("gc_full_pass", pause_ms=round((last_full - now) * 1000, 1),
                                    cpu_ms=round(cpu * 1000, 1), waited_ms=round((now - due_at) * 1000),
                                    blocks_before=before, blocks_after=after_full, released=_released)
        _released, due_at = 0, None
