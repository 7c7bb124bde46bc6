"""The session disk's health as a service sees it: free bytes and inodes, and whether it takes a write.

A probe every GAMMA_DISK_PROBE_S, in the I/O pool (never on the event loop): `statvfs` of the data
dir (free bytes and inodes, the read-only flag) and a one-byte atomic write (temp, fsync, rename) of
the service's own probe file, which is what proves the disk takes a write now: a network filesystem
fails it with EIO or ESTALE while `statvfs` may still answer. A probe that does not return within
GAMMA_DISK_PROBE_TIMEOUT_S counts as a failing disk, and no second probe starts while it hangs.

The states (README "Reliability"): `ok`; `full` (ENOSPC/EDQUOT, or fewer free bytes than
GAMMA_DISK_MIN_FREE_BYTES, or no free inode): writes answer 507 and reads go on; `read_only` (EROFS)
and `io_error` (EIO, a lost mount, a hang): writes and reads that fail answer 503. `/readyz` reports
any state but `ok` as `degraded` (still 200: reads and everything kept in Redis go on, and every pod
shares the one disk, so taking them all out of service helps nobody); the runtime takes no lease
while the disk is not `ok` (services/runtime/hosting/worker.py) and resumes once it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from prometheus_client import CollectorRegistry

from shared.storage.disk import FULL_ERRNOS, atomic_write_bytes
from shared.storage.leftovers import leftover_temps, sweep_leftover_temps
from shared.telemetry import metrics

log = structlog.get_logger()
DiskStateName = Literal["ok", "full", "read_only", "io_error"]
STATES: tuple[DiskStateName, ...] = ("ok", "full", "read_only", "io_error")
PROBE_DIR = ".probe"  # beside sessions/, never inside one


@dataclass(frozen=True)
class DiskState:
    state: DiskStateName
    free_bytes: int | None = None
    free_inodes: int | None = None
    error: str | None = None

    def view(self) -> dict[str, object]:
        return {"state": self.state, "free_bytes": self.free_bytes, "free_inodes": self.free_inodes,
                **({"error": self.error} if self.error else {})}


def _from_error(exc: OSError, free_bytes: int | None, free_inodes: int | None) -> DiskState:
    name = errno.errorcode.get(exc.errno or 0, "OSError")
    if exc.errno in FULL_ERRNOS:
        return DiskState("full", free_bytes, free_inodes, name)
    if exc.errno == errno.EROFS:
        return DiskState("read_only", free_bytes, free_inodes, name)
    return DiskState("io_error", free_bytes, free_inodes, name)


def probe(data_dir: Path, name: str, min_free_bytes: int) -> DiskState:
    """One look at the disk (blocking: run it in a thread)."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        st = os.statvfs(data_dir)
    except OSError as exc:
        return _from_error(exc, None, None)
    free_bytes, free_inodes = st.f_bavail * st.f_frsize, st.f_favail
    if st.f_flag & os.ST_RDONLY:
        return DiskState("read_only", free_bytes, free_inodes, "EROFS")
    try:
        atomic_write_bytes(data_dir / PROBE_DIR / f"{name}-{os.getpid()}", b"1")
    except OSError as exc:
        return _from_error(exc, free_bytes, free_inodes)
    if free_bytes < min_free_bytes or (st.f_files > 0 and free_inodes == 0):
        return DiskState("full", free_bytes, free_inodes, "below the free-space floor")
    return DiskState("ok", free_bytes, free_inodes)


class DiskHealth:
    """The latest probe's state, exported as gauges (shared/telemetry/metrics.py) and under /readyz."""

    def __init__(self, data_dir: Path, service: str, registry: CollectorRegistry, *, interval_s: float,
                 timeout_s: float, min_free_bytes: int) -> None:
        self.data_dir = data_dir
        self.service = service
        self.registry = registry
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.min_free_bytes = min_free_bytes
        self.current = DiskState("ok")
        self.changed = asyncio.Event()  # set at every change of state (the runtime waits on it)
        self._inflight: asyncio.Future[DiskState] | None = None

    @property
    def ok(self) -> bool:
        return self.current.state == "ok"

    async def check(self) -> DiskState:
        """Probe now (or keep waiting on the probe still under way) and record the result."""
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(asyncio.to_thread(
                probe, self.data_dir, self.service, self.min_free_bytes))
        try:
            found = await asyncio.wait_for(asyncio.shield(self._inflight), self.timeout_s)
        except TimeoutError:
            found = DiskState("io_error", self.current.free_bytes, self.current.free_inodes,
                              f"the disk did not answer within {self.timeout_s:g} s")
        if found.state == "ok" and leftover_temps():
            # Before "ok" is reported: the temp files a failing disk kept go first.
            left = await asyncio.to_thread(sweep_leftover_temps)
            log.info("leftover_temps_swept", remaining=left)
        self._record(found)
        return found

    def _record(self, found: DiskState) -> None:
        before, self.current = self.current, found
        metrics.session_disk(self.registry, found.state, found.free_bytes, found.free_inodes, STATES)
        if before.state != found.state:
            (log.info if found.state == "ok" else log.warning)(
                "session_disk_state", state=found.state, was=before.state, error=found.error,
                free_bytes=found.free_bytes, free_inodes=found.free_inodes)
            self.changed.set()
            self.changed = asyncio.Event()

    async def run_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.check()
            await asyncio.sleep(self.interval_s)

    async def wait_ok(self, stopping: asyncio.Event | None = None) -> None:
        """Return once the disk is `ok` (at once when it is), re-probing every interval meanwhile."""
        while not self.ok and not (stopping is not None and stopping.is_set()):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), self.interval_s)
            if not self.ok:
                await self.check()
