"""Start one confined process and collect it: capped output, wall-clock timeout, Stop, whole-group kill.

The process is started in a session of its own (start_new_session: done by the C fork/exec code, no
`preexec_fn` in the asyncio process), so a SIGKILL to its process group reaches it. For bwrap that
is the outer bwrap, whose pid-1 child dies with it (--die-with-parent), which takes the whole pid
namespace down; for landlock the seccomp filter forbids setsid/setpgid, so every descendant is still
in the group. The group is killed also after a normal exit: background children never outlive the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

CHUNK = 65536
DRAIN_S = 2.0  # after the kill, how long the pipe may take to reach EOF
# After the kill, how long the process may take to exit before the call's result goes back without
# its exit code: a task the kernel holds in a memory cgroup's reclaim or OOM handling dies only once
# that ends, and the result must not wait on the kernel (the process is reaped in the I/O pool).
REAP_S = 10.0


@dataclass
class Capture:
    """Head and tail of a stream of unknown (possibly unbounded) size, in bounded memory."""

    cap: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        half = self.cap // 2
        room = half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * half:
                del self.tail[: len(self.tail) - half]

    def text(self) -> tuple[str, bool]:
        head = self.head.decode("utf-8", errors="replace")
        tail = bytes(self.tail[-(self.cap // 2):]) if self.total > self.cap else bytes(self.tail)
        if self.total <= self.cap:
            return head + tail.decode("utf-8", errors="replace"), False
        cut = self.total - len(self.head) - len(tail)
        return head + f"\n\n[... {cut} bytes cut ...]\n\n" + tail.decode("utf-8", errors="replace"), True


@dataclass
class Exit:
    code: int | None
    output: str
    truncated: bool
    timed_out: bool
    aborted: bool
    duration: float
    stopped: str | None = None  # the watchdog's reason, when it had the call killed


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _pump(stream: asyncio.StreamReader, capture: Capture) -> None:
    while True:
        data = await stream.read(CHUNK)
        if not data:
            return
        capture.add(data)


async def _exited(pid: int) -> None:
    """The process itself has exited (asyncio's Process.wait() also waits for its pipes, which a
    background child may hold open): a pidfd turns readable at exit."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already exited and reaped
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def run_confined(argv: Sequence[str], *, env: dict[str, str], cwd: str | None, wall_s: float,
                       stop: asyncio.Event | None, output_chars: int, pass_fds: Sequence[int] = (),
                       watchdog: Coroutine[Any, Any, str] | None = None) -> Exit:
    """`watchdog` returns a reason once the call must be killed (a limit the kernel does not enforce)."""
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    # subprocess.Popen (vfork + exec, no preexec_fn), as asyncio's own subprocess API does inline; the
    # pipe is read by the loop and the exit seen through a pidfd (uvloop and asyncio alike).
    proc = subprocess.Popen(  # noqa: ASYNC220
        list(argv), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, pass_fds=tuple(pass_fds))
    assert proc.stdout is not None
    reader = asyncio.StreamReader(limit=CHUNK * 4)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
    capture = Capture(output_chars)
    pump = asyncio.ensure_future(_pump(reader, capture))
    waiter = asyncio.ensure_future(_exited(proc.pid))
    stopper = asyncio.ensure_future(stop.wait()) if stop is not None else None
    guard = asyncio.ensure_future(watchdog) if watchdog is not None else None
    timed_out = aborted = False
    stopped: str | None = None
    try:
        waits = {waiter} | {t for t in (stopper, guard) if t is not None}
        done, _ = await asyncio.wait(waits, timeout=wall_s, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            aborted = stopper is not None and stopper in done
            if guard is not None and guard in done and not aborted:
                stopped = guard.result()
            timed_out = not aborted and stopped is None
        kill_group(proc.pid)  # also after a normal exit: what the command left running goes too
        try:
            await asyncio.wait_for(asyncio.shield(waiter), REAP_S)
            proc.poll()  # reap: the pidfd said it exited
        except TimeoutError:
            loop.run_in_executor(None, proc.wait)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(pump), DRAIN_S)
    except asyncio.CancelledError:
        kill_group(proc.pid)
        await asyncio.shield(asyncio.to_thread(proc.wait))
        raise
    finally:
        for task in (stopper, guard, waiter, pump):
            if task is not None:
                task.cancel()
        transport.close()
    text, truncated = capture.text()
    return Exit(proc.returncode, text, truncated, timed_out, aborted, time.monotonic() - started, stopped)
