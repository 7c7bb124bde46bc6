"""CPU-bound work a tenant's input drives, run outside the service's process (docs/architecture.md
"Bounded work"): connector argument validation and image decoding.

A thread would not do: a CPU-bound validator or decoder holds the GIL, so the event loop every other
session shares stalls all the same. A `Pool` keeps a few worker processes (`python -m
shared.pools.offload_worker`, started on first use and again after each death), each under an address-space
limit (RLIMIT_AS) and at the lowest CPU priority (the loop that serves every session runs first). One
job at a time per worker. A job's time budget is CPU time, checked by the kernel while it runs
(RLIMIT_CPU): past it the worker is ended and the next job gets a fresh one; a job the loop's turns
slow down is not cut short for them, and a job that waits on nothing for `WALL_FACTOR` times its budget
is killed all the same. A job past the memory limit fails in the worker (MemoryError) or kills it. Waiting for a free worker is bounded too: past `queue_wait_s` the caller is told `Busy`.

Jobs name a module-level function as `"module:function"`; arguments and results
travel pickled over the worker's stdin/stdout, framed by an 8-byte length.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import struct
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger()
FRAME = struct.Struct(">Q")
SPAWN_TIMEOUT_S = 60.0
# A job's wall-clock bound, in multiples of its CPU budget: a worker at nice 19 on a busy host gets a
# small share of a core, so its CPU budget runs slower than the clock.
WALL_FACTOR = 4.0
REAP_WAIT_S = 5.0  # how long a worker whose pipe closed may take to exit before it is killed


class OffloadError(Exception):
    """The job did not finish: over its time budget, its worker died, or no worker was free."""


class TimedOut(OffloadError):
    pass


class WorkerDied(OffloadError):
    pass


class Busy(OffloadError):
    """Every worker stayed busy past the queue wait (a 503 to a client, an error result to the agent)."""


@dataclass
class _Worker:
    proc: asyncio.subprocess.Process

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


@dataclass
class Pool:
    """`size` workers of at most `memory_bytes` of address space each."""

    name: str
    size: int = 1
    memory_bytes: int = 1024 * 1024 * 1024
    queue_wait_s: float = 5.0
    # "module:function" run once as each worker starts (imports, compiled tables), before it counts as
    # ready: a job's time budget is for the job, not for a cold start on a loaded host.
    warm: str = ""
    _idle: asyncio.Queue[_Worker | None] | None = field(default=None, init=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)

    def _slots(self) -> asyncio.Queue[_Worker | None]:
        loop = asyncio.get_running_loop()
        if self._idle is None or self._loop is not loop:  # a test's new loop: its own slots
            self._loop = loop
            self._idle = asyncio.Queue()
            for _ in range(self.size):
                self._idle.put_nowait(None)  # None: a slot whose worker starts on first use
        return self._idle

    async def _spawn(self) -> _Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shared.pools.offload_worker", str(self.memory_bytes), self.warm,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=2**20)
        worker = _Worker(proc)
        try:
            assert proc.stdout is not None
            await asyncio.wait_for(proc.stdout.readexactly(FRAME.size), SPAWN_TIMEOUT_S)  # its "ready"
        except (TimeoutError, asyncio.IncompleteReadError) as exc:
            await self._kill(worker)
            raise WorkerDied(f"{self.name}: a worker did not start") from exc
        return worker

    @contextlib.asynccontextmanager
    async def _worker(self) -> AsyncIterator[list[_Worker | None]]:
        slots = self._slots()
        try:
            got = await asyncio.wait_for(slots.get(), self.queue_wait_s)
        except TimeoutError:
            raise Busy(f"every {self.name} worker is busy; try again shortly") from None
        held: list[_Worker | None] = [got]
        try:
            yield held
        finally:
            slots.put_nowait(held[0])

    async def run(self, function: str, *args: Any, timeout_s: float) -> Any:
        """`function(*args)` in a worker; its exception is raised here (pickled across)."""
        async with self._worker() as held:
            worker = held[0]
            if worker is None or not worker.alive:
                worker = held[0] = await self._spawn()
            over = TimedOut(f"{self.name}: {function.rsplit(':', 1)[-1]} took over {timeout_s:g} s")
            try:
                status, value = await asyncio.wait_for(self._ask(worker, function, args, timeout_s),
                                                       timeout_s * WALL_FACTOR)
            except TimeoutError:
                await self._kill(worker)
                held[0] = None
                raise over from None
            except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError) as exc:
                await self._reap(worker)
                held[0] = None
                if worker.proc.returncode == -signal.SIGXCPU:  # its CPU budget spent (RLIMIT_CPU)
                    raise over from None
                raise WorkerDied(f"{self.name}: the worker ended during the job (over its memory limit?)") from exc
            except BaseException:  # cancelled mid-job: the worker's state is unknown
                await self._kill(worker)
                held[0] = None
                raise
        if status == "ok":
            return value
        raise value

    @staticmethod
    async def _ask(worker: _Worker, function: str, args: tuple[Any, ...], cpu_s: float) -> tuple[str, Any]:
        assert worker.proc.stdin is not None and worker.proc.stdout is not None
        body = pickle.dumps((function, args, cpu_s), protocol=pickle.HIGHEST_PROTOCOL)
        worker.proc.stdin.write(FRAME.pack(len(body)) + body)
        await worker.proc.stdin.drain()
        (n,) = FRAME.unpack(await worker.proc.stdout.readexactly(FRAME.size))
        reply: tuple[str, Any] = pickle.loads(await worker.proc.stdout.readexactly(n))
        return reply

    @classmethod
    async def _reap(cls, worker: _Worker) -> None:
        """Its exit status, for a worker whose pipe closed: it is ending on its own. Killed only if it
        does not end: `Process.kill` on a child that has just exited reaps it first (Popen's poll
        before the signal), and the loop's child watcher then reports 255 instead of the signal
        that ended it, which would read as a death from memory rather than from its CPU budget."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(worker.proc.wait()), REAP_WAIT_S)
        await cls._kill(worker)

    @staticmethod
    async def _kill(worker: _Worker) -> None:
        if worker.alive:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(worker.proc.wait(), 5)

    async def close(self) -> None:
        if self._idle is None:
            return
        while not self._idle.empty():
            w = self._idle.get_nowait()
            if w is not None:
                await self._kill(w)


class PerKey:
    """At most `per_key` jobs in flight per key (a user); past `wait_s` of waiting, `Busy`. A key's
    entry goes once none of its jobs is in flight, so nothing grows per user."""

    def __init__(self, per_key: int, wait_s: float) -> None:
        self.per_key, self.wait_s = per_key, wait_s
        self._keys: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def slot(self, key: str) -> AsyncIterator[None]:
        sem, holders = self._keys.setdefault(key, (asyncio.Semaphore(self.per_key), [0]))
        holders[0] += 1
        try:
            try:
                await asyncio.wait_for(sem.acquire(), self.wait_s)
            except TimeoutError:
                raise Busy(f"{self.per_key} of your jobs are running already") from None
            try:
                yield
            finally:
                sem.release()
        finally:
            holders[0] -= 1
            if holders[0] == 0:
                self._keys.pop(key, None)

    def __len__(self) -> int:
        return len(self._keys)


_POOLS: dict[tuple[int, str], Pool] = {}


def pool(name: str, size: int, memory_bytes: int, queue_wait_s: float = 5.0, warm: str = "") -> Pool:
    """The process's pool of that name (one per process: a forked runtime worker gets its own)."""
    key = (os.getpid(), name)
    if key not in _POOLS:
        _POOLS[key] = Pool(name, size=size, memory_bytes=memory_bytes, queue_wait_s=queue_wait_s, warm=warm)
    return _POOLS[key]
