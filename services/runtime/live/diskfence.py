"""The disk fence: the lease's fencing token enforced where the runtime writes, on the session disk.

The lease (lease.py) tells a holder when it may still write, but its check and the write that follows
are two steps: a process stopped between them (SIGSTOP, a stalled VM, a long GC pause) passes the check,
sleeps past its lease while another worker takes the session, and then writes once resumed. With three
runtime workers the fault suite saw exactly that: a transcript line stamped before the new holder's
lines, appended after them, with the old leaf as its parent (a fork written late).

So the token is also checked by the disk itself. `{session}/.fence` holds the fence of the newest
holder that claimed the session's disk, under an exclusive `flock` on that file:
- a new holder claims (`claim`) after taking its lease and before reading anything: under the lock it
  checks that no newer fence is stored and stores its own;
- every write (`hold`, called by the session's `WriteGuard`, write_guard.py) takes the lock, checks
  that the stored fence is still its own, and keeps the lock until the write is done (`release`); the
  write runs in the I/O pool meanwhile. The transcript releases as soon as its lines are readable,
  before their fsync, which can take long on a busy disk.
A stale writer therefore either wrote before the claim (the new holder reads its line) or finds a newer
fence and writes nothing: there is no window left between the check and the visible write. A process
frozen inside that critical section (one write) holds the lock: the next holder's claim waits for
it (the kernel drops the lock when the process dies), choosing safety over a faster takeover.
`flock` is per open file description, so two tasks of one process pass each other's lock: the
`WriteGuard` makes a session's writes take turns; Linux NFS maps `flock` to POSIX locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from pathlib import Path

from services.runtime.live.lease import LeaseLost

WIDTH = 20  # the fence as a fixed-width decimal: one pwrite, never a torn number among readers
POLL_S = 0.005


class FenceBehind(LeaseLost):  # noqa: N818 - a LeaseLost
    """The disk holds a newer fence than the lease's: Redis lost its counter (a restore, a failover to a
    lagging replica). The holder must raise the counter past `stored` and take a new lease."""

    def __init__(self, sid: str, stored: int) -> None:
        super().__init__(sid)
        self.stored = stored


class DiskFenceBusy(TimeoutError):
    """The fence file stayed locked (a writer frozen inside its write): transient, retried."""


class DiskFence:
    def __init__(self, path: Path, sid: str, fence: int, lock_timeout_s: float = 10.0) -> None:
        self.path = path
        self.sid = sid
        self.fence = fence
        self.lock_timeout_s = lock_timeout_s
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd

    async def _lock(self, deadline: float | None = None) -> int:
        """Exclusive lock without blocking the event loop: polled, bounded (`deadline`: monotonic)."""
        fd = self._open()
        deadline = time.monotonic() + self.lock_timeout_s if deadline is None else deadline
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise DiskFenceBusy(f"{self.path} locked for {self.lock_timeout_s} s") from None
                await asyncio.sleep(POLL_S)

    def release(self) -> None:
        """The write `hold` was taken for is done."""
        self._unlock()

    def _unlock(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def stored(self) -> int:
        """The fence on disk (0 when none was ever stored). Caller holds the lock."""
        raw = os.pread(self._open(), WIDTH, 0).strip(b"\0 \n")
        return int(raw) if raw.isdigit() else 0

    async def claim(self, until: float | None = None) -> None:
        """The new holder, before it reads the session disk: no newer fence may be stored; store ours.
        Raises FenceBehind when the disk holds a newer one. `until` (monotonic): give up waiting for
        the lock then (the lease's own bound: past it the claim is moot).

        Each attempt is one hop to the I/O pool (open, lock, read, write, fsync, unlock): the fsync
        waits on the disk, which the event loop and every other session's stream must not
        (bench/wake_load.py); one hop, since under a busy loop each hop waits a loop turn."""
        deadline = time.monotonic() + self.lock_timeout_s if until is None else until
        while True:
            attempt = asyncio.ensure_future(asyncio.to_thread(self._try_claim))
            try:
                stored = await asyncio.shield(attempt)
            except asyncio.CancelledError:  # it goes on in its thread: the caller returns once it ended
                await asyncio.wait({attempt})
                raise
            if stored is not None:
                break
            if time.monotonic() > deadline:
                raise DiskFenceBusy(f"{self.path} locked for {self.lock_timeout_s} s")
            await asyncio.sleep(POLL_S)
        if stored > self.fence:
            raise FenceBehind(self.sid, stored)

    def _try_claim(self) -> int | None:
        """Blocking: under the lock, the stored fence, ours written and synced when it is newer; None
        when another process holds the lock (a writer frozen inside its write)."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        try:
            stored = self.stored()
            if stored < self.fence:
                os.pwrite(fd, str(self.fence).rjust(WIDTH).encode(), 0)
                os.fsync(fd)
            return stored
        finally:
            self._unlock()

    async def hold(self) -> None:
        """Return with the lock held and our fence still the stored one (else LeaseLost); the caller
        calls `release` once its write is done."""
        await self._lock()
        try:
            if self.stored() != self.fence:
                raise LeaseLost(self.sid)
        except BaseException:
            self._unlock()
            raise

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)
