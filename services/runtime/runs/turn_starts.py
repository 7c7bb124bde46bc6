"""Turn starts paced on a worker's event loop (docs/architecture.md "Streaming at scale").

A turn's start is several ms of the loop's CPU spread over many steps: the prompt's transcript
appends, its ack and awaited events, the compaction check, the model request's body and its opening
through the openai client. When a couple of hundred turns start within a second or two, the loop is
~90% busy with their steps, and every streaming session's text waits behind them for the delta
coalescing tick (sender.py): the streams' tail latency (bench-stream, bench/results/stream.md).

The gate lets at most `limit` turns of the worker be in their start at once; the others wait in the
order they came. A start ends when the turn's model request is open (its response headers are in),
or when its run ends first (StartPass.release, called by whichever comes first; a second call does
nothing). Fewer turn steps are then ready in each turn of the loop, so the tick waits behind fewer.

It can neither deadlock nor starve: a waiter passes after `max_wait_s` whatever the count (a pass
never released, a bug, then costs each start at most that wait); a waiter cancelled (its session
closed, its run cancelled) leaves the queue, and a slot handed to it just as it was cancelled goes to
the next; a `stop` event (the run's abort) ends the wait at once with a pass that holds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class StartPass:
    """A turn's way through the gate; `held` while it counts against the limit."""

    __slots__ = ("_gate", "held", "waited_s")

    def __init__(self, gate: StartGate | None, held: bool, waited_s: float = 0.0) -> None:
        self._gate = gate
        self.held = held
        self.waited_s = waited_s  # how long the turn waited for it (0 when it passed at once)

    def release(self) -> None:
        """The start is over (the model request open, or the run ended): the next waiter goes."""
        if self.held:
            self.held = False
            assert self._gate is not None
            self._gate._free()


FREE = StartPass(None, held=False)  # what a turn gets with the gate off


class StartGate:
    def __init__(self, limit: int, max_wait_s: float) -> None:
        self.limit = limit  # turns in their start at once; 0: no gate
        self.max_wait_s = max_wait_s
        self.active = 0  # passes held (can exceed `limit` by the waiters let through at `max_wait_s`)
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.waited = 0  # passes that had to wait (metrics, tests)
        self.timed_out = 0  # waiters let through by `max_wait_s`

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def enter(self, stop: asyncio.Event | None = None) -> StartPass:
        """A pass for one turn's start: at once while fewer than `limit` are held and nobody waits,
        else in FIFO order, at most `max_wait_s` later; at once (holding nothing) when `stop` is set."""
        if self.limit <= 0:
            return FREE
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return StartPass(self, held=True)
        if stop is not None and stop.is_set():
            return StartPass(self, held=False)
        loop = asyncio.get_running_loop()
        began = loop.time()
        turn = loop.create_future()
        self._waiters.append(turn)
        self.waited += 1
        stopper = asyncio.ensure_future(stop.wait()) if stop is not None else None
        try:
            await asyncio.wait({turn} if stopper is None else {turn, stopper}, timeout=self.max_wait_s,
                               return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._leave(turn)
            raise
        finally:
            if stopper is not None:
                stopper.cancel()
        if turn.done():  # handed a slot by `_free` (counted there)
            return StartPass(self, held=True, waited_s=loop.time() - began)
        self._leave(turn)
        if stop is not None and stop.is_set():
            return StartPass(self, held=False, waited_s=loop.time() - began)
        self.timed_out += 1  # waited long enough: through, over the limit
        self.active += 1
        return StartPass(self, held=True, waited_s=loop.time() - began)

    def _leave(self, turn: asyncio.Future[None]) -> None:
        """A waiter that goes without its slot: out of the queue; a slot handed to it meanwhile goes on."""
        if turn.done() and not turn.cancelled():
            self._free()
            return
        turn.cancel()
        with contextlib.suppress(ValueError):
            self._waiters.remove(turn)

    def _free(self) -> None:
        self.active -= 1
        while self._waiters and self.active < self.limit:
            turn = self._waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                self.active += 1
