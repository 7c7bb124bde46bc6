"""The cyclic GC's full collections off the streaming path (docs/architecture.md "Streaming at scale").

`settle_heap` freezes what startup allocated, but the sessions' own long-lived state (transcripts,
models, Outboxes: 100-200 streaming sessions) was scanned in full by every gen-2 collection, which
CPython runs each time the long-lived heap grows by a quarter: bench-stream's GC probe saw the
runtime's loop stop for 39-81 ms of CPU inside a 7-s stream at 100 sessions (60-117 ms during the
wake-up), every session's tokens held at once: the added latency's worst 1%.

Here, every `freeze_s`, the young generations are collected (cheap: only what is new) and what
survived is frozen, so an automatic gen-2 collection scans only what was promoted since. Cyclic
garbage among frozen objects is not collected until the next full pass: every `full_s` the heap is
unfrozen and collected once (a full collection's pause, that rarely), then frozen again. Refcounted
garbage, the bulk, is freed at once, as always.
"""

from __future__ import annotations

import asyncio
import gc
import time


def freeze_young() -> None:
    gc.collect(1)  # generations 0 and 1: cycles among recent objects go now, not after the next full pass
    gc.freeze()


def full_pass() -> None:
    gc.unfreeze()
    gc.collect()
    gc.freeze()


async def heap_freezer(freeze_s: float, full_s: float) -> None:
    """Runs for the service's life (ServiceContext.spawn); `freeze_s` <= 0: off."""
    if freeze_s <= 0:
        return
    last_full = time.monotonic()
    while True:
        await asyncio.sleep(freeze_s)
        if time.monotonic() - last_full >= full_s:
            full_pass()
            last_full = time.monotonic()
        else:
            freeze_young()
