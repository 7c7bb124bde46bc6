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

A full pass holds the event loop for as long as it scans the whole heap: ~0.3 s in the runtime with 200
sessions, every streaming session's tokens held meanwhile (bench-stream's added p99, all of its worst
1% in one 0.5-s bucket as the turns started: the turns' allocations had grown the frozen heap past
`full_growth`; bench/results/stream.md "Session 15"). A process can say when such a pause costs most
(`defer_while`: the runtime, while model streams are read): a pass that falls due then waits until
that ends, at most `defer_s`, so a wave of turns does not pay it mid-stream; one that keeps streaming
pays it `defer_s` late: the heap's bound grows by what `defer_s` of allocations add.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
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


def freeze_young() -> int:
    """Collects the young generations and freezes what survived; returns how many objects it froze."""
    gc.collect(1)  # generations 0 and 1: cycles among recent objects go now, not after the next full pass
    fresh = len(gc.get_objects(2))  # all that is not frozen yet (0 and 1 are empty now): what was promoted since
    gc.freeze()
    return fresh


class FrozenCount:
    """The frozen heap's size for `full_pass_due`, without walking it every time: `gc.get_freeze_count()`
    follows every frozen object's link (~70 ms at 2M objects, the event loop held: every `freeze_s`,
    in every service; bench/results/stream.md "Session 15"). What each freeze adds is counted
    instead; the sum is an upper bound (frozen objects also die), so while it stays within the growth
    threshold the true size does too, and the heap is walked only once the bound passes it."""

    def __init__(self) -> None:
        self.known = gc.get_freeze_count()  # the size at the last walk
        self.added = 0  # frozen since that walk

    def froze(self, n: int) -> None:
        self.added += n

    def at_most(self, threshold: float) -> int:
        """The frozen heap's size, or (while that is certainly no more than `threshold`) a bound on it."""
        if self.known + self.added > threshold:
            self.known, self.added = gc.get_freeze_count(), 0
        return self.known + self.added

    def reset(self) -> int:
        self.known, self.added = gc.get_freeze_count(), 0
        return self.known


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
    sessions closing and waking while no object count grew (docs/operations.md "Network faults to Redis, and the soak"). False without glibc."""
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
    a wave of 50 closes and 50 wakes in a one-off 7-minute soak). Growth of the live heap (a
    wake-up of many sessions) triggers a pass too, as CPython's own gen-2 rule would."""
    return (elapsed_s >= full_s or frozen > frozen_after_full * (1 + growth)
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
    """Runs for the service's life (ServiceContext.spawn); `freeze_s` <= 0: off. A due full pass waits
    up to `defer_s` for the end of a busy spell (`defer_while`), looking every DEFER_POLL_S. `trim`:
    `malloc_trim` after each full pass."""
    global _released
    if freeze_s <= 0:
        return
    frozen = FrozenCount()
    last_full, after_full = time.monotonic(), frozen.known
    last_young = last_full
    due_at: float | None = None  # when the pass fell due (it waits while the process is busy)
    while True:
        await asyncio.sleep(freeze_s if due_at is None else min(freeze_s, DEFER_POLL_S))
        now = time.monotonic()
        if due_at is None and full_pass_due(now - last_full, full_s, frozen.at_most(after_full * (1 + full_growth)),
                                            after_full, full_growth, _released, full_released):
            due_at = now
        if due_at is not None and not deferred(now - due_at, defer_s):
            full_pass(trim)
            last_full = last_young = time.monotonic()
            before, after_full = after_full, frozen.reset()
            # The pass held the loop for `pause_ms`: logged so that a latency spike can be matched
            # to it (each service's log, docs/operations.md "Observability").
            structlog.get_logger().info("gc_full_pass", pause_ms=round((last_full - now) * 1000, 1),
                                        waited_ms=round((now - due_at) * 1000), frozen_before=before,
                                        frozen_after=after_full, released=_released)
            _released, due_at = 0, None
        elif now - last_young >= freeze_s * 0.99:  # deferred: the young ones still frozen on time
            frozen.froze(freeze_young())
            last_young = now
