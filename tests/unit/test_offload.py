"""Worker processes for tenant-driven CPU work (shared/pools/offload.py): a job runs in another process, a job
past its time budget has its worker killed and the next job gets a fresh one, a job past the memory
limit fails without taking the caller with it, and a caller that waits too long for a worker is told
it is busy."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from shared.pools import offload
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(60)
PROBE = "tests.support.offload_probe"


async def test_a_job_runs_in_another_process_and_its_exception_comes_back() -> None:
    pool = offload.Pool("t", size=1)
    try:
        assert await pool.run(f"{PROBE}:pid", timeout_s=30) != os.getpid()
        with pytest.raises(AttributeError):
            await pool.run(f"{PROBE}:missing", timeout_s=30)
    finally:
        await pool.close()


async def test_a_job_past_its_budget_is_killed_and_the_next_gets_a_fresh_worker() -> None:
    pool = offload.Pool("t", size=1)
    try:
        first = await pool.run(f"{PROBE}:pid", timeout_s=30)
        with pytest.raises(offload.TimedOut):
            await pool.run(f"{PROBE}:spin", 60.0, timeout_s=0.5)
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)  # the spinning worker is gone, not left burning a core
        second = await pool.run(f"{PROBE}:pid", timeout_s=30)
        assert second not in (first, os.getpid())
    finally:
        await pool.close()


async def test_a_worker_runs_at_the_lowest_priority_and_yields_to_a_waking_loop() -> None:
    pool = offload.Pool("t", size=1)
    try:
        assert await pool.run(f"{PROBE}:priority", timeout_s=30) == (os.SCHED_BATCH, 19)
    finally:
        await pool.close()


async def test_a_budget_is_cpu_time_so_a_job_slowed_by_others_is_not_cut_short() -> None:
    """A job that got little CPU (here: none, it sleeps) past its budget's wall time still finishes;
    one that spends its CPU budget is ended by the kernel (the test above)."""
    pool = offload.Pool("t", size=1)
    try:
        assert await pool.run(f"{PROBE}:sleep", 1.5, timeout_s=1.0) == 1.5
        with pytest.raises(offload.TimedOut):
            await pool.run(f"{PROBE}:sleep", 60.0, timeout_s=0.25)  # past WALL_FACTOR x its budget
    finally:
        await pool.close()


async def test_a_job_past_the_memory_limit_fails_in_the_worker() -> None:
    pool = offload.Pool("t", size=1, memory_bytes=256 * 1024 * 1024)
    try:
        with pytest.raises((MemoryError, offload.WorkerDied)):
            await pool.run(f"{PROBE}:allocate", 512 * 1024 * 1024, timeout_s=30)
        assert await pool.run(f"{PROBE}:allocate", 1024, timeout_s=30) == 1024  # the pool still answers
    finally:
        await pool.close()


async def test_a_caller_waiting_past_the_queue_wait_is_told_busy() -> None:
    pool = offload.Pool("t", size=1, queue_wait_s=0.2)
    try:
        busy = asyncio.ensure_future(pool.run(f"{PROBE}:spin", 2.0, timeout_s=30))

        async def taken() -> bool:  # the spinning job holds the one worker
            return pool._idle is not None and pool._idle.empty()

        await eventually(taken, timeout=10, what="the worker taken")
        with pytest.raises(offload.Busy):
            await pool.run(f"{PROBE}:pid", timeout_s=30)
        assert await busy > 0
    finally:
        await pool.close()


async def test_one_key_holds_at_most_its_share_and_leaves_nothing_behind() -> None:
    slots = offload.PerKey(1, wait_s=0.2)
    async with slots.slot("alice"):
        with pytest.raises(offload.Busy):
            async with slots.slot("alice"):
                pass
        async with slots.slot("bob"):  # another key is not held up
            assert len(slots) == 2
    assert len(slots) == 0



class _Exiting:
    """A worker process whose pipe has closed and that exits a moment later, by SIGXCPU."""

    returncode: int | None = None

    async def wait(self) -> int:
        await asyncio.sleep(0.01)
        self.returncode = -signal.SIGXCPU
        return self.returncode

    def kill(self) -> None:
        raise AssertionError("killed while it was exiting")


async def test_a_worker_whose_pipe_closed_is_left_to_exit_and_read_by_its_signal() -> None:
    """Killing a child that has just exited reaps it first (Popen polls before the signal): the child
    watcher then reported 255, and a job past its CPU budget read as a death from memory."""
    worker = offload._Worker(_Exiting())  # type: ignore[arg-type]
    await offload.Pool._reap(worker)
    assert worker.proc.returncode == -signal.SIGXCPU
