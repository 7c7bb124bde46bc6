"""A memory cgroup per sandboxed call, where the host lets the runtime make one.

RLIMIT_AS bounds one process's address space, not what a call holds: tmpfs and other shared memory
(/tmp, HOME and /dev/shm under bwrap, memfd, SysV shm) is no process's address space once unmapped,
and a call has many processes. The kernel charges every page (anonymous, page cache, shmem) to the
memory cgroup of the task that first touches it, so one cgroup per call with a limit bounds all of
it together: past the limit the kernel reclaims, then kills inside the call only (README "Security").

The call enters its cgroup before anything of it runs: a gate (`/bin/sh`, ~1 ms) writes its own pid
("0") into `cgroup.procs` and execs the layer's argv, so every process the call forks is born inside.

Which cgroup holds the calls (`GAMMA_SANDBOX_CGROUP`): `auto` takes the runtime's own cgroup in the
cgroup-v1 memory hierarchy, or its cgroup-v2 directory when the memory controller is delegated to its
children; a path names a delegated directory; `off` (or nothing writable) keeps only the tmpfs sizes
and RLIMIT_AS. Blocking file-system calls: the caller runs them in the I/O pool.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PREFIX = "gamma-call-"
GATE = ('echo 0 >"$0" || { echo "sandbox: cannot enter the call\'s memory cgroup" >&2; exit 126; }; '
        'exec "$@"')
_counter = itertools.count()


@dataclass(frozen=True)
class Base:
    """The directory the per-call cgroups are made in."""

    path: Path
    version: Literal[1, 2]


@dataclass(frozen=True)
class CallGroup:
    path: Path
    version: Literal[1, 2]

    def gate(self, argv: list[str]) -> list[str]:
        return ["/bin/sh", "-c", GATE, str(self.path / "cgroup.procs"), *argv]

    def oom_kills(self) -> int:
        """Processes the kernel killed at the limit (v1 memory.oom_control, v2 memory.events)."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self, wait_s: float = 2.0) -> bool:
        """rmdir once the call's last process has gone (the pid namespace's teardown is asynchronous);
        charges left behind (page cache) move to the parent. False: still busy, a later sweep takes it."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fstype, super options) of the cgroup file systems."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split(" ")
            sep = fields.index("-")
            if fields[sep + 1] in ("cgroup", "cgroup2"):
                out.append((fields[4], fields[sep + 1], fields[sep + 3]))
    return out


def _own() -> dict[str, str]:
    """controller ("" for v2) -> the process's cgroup path."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
    return own


def _usable(path: Path) -> bool:
    """A probe child can be made, limited and removed here."""
    probe = path / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / "memory.limit_in_bytes").exists() or (probe / "memory.max").exists()
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def find_base(setting: str) -> Base | None:
    setting = setting.strip()
    if setting.lower() in ("off", "none", ""):
        return None
    if setting.lower() != "auto":
        path = Path(setting)
        version: Literal[1, 2] = 2 if (path / "cgroup.controllers").exists() else 1
        return Base(path, version) if _usable(path) else None
    own = _own()
    for mount, fstype, options in _mounts():
        if fstype == "cgroup" and "memory" in options.split(",") and "memory" in own:
            v1 = Path(mount + own["memory"])
            if _usable(v1):
                return Base(v1, 1)
        if fstype == "cgroup2" and "" in own:
            v2 = Path(mount + own[""])
            with contextlib.suppress(OSError):
                if "memory" in (v2 / "cgroup.subtree_control").read_text().split() and _usable(v2):
                    return Base(v2, 2)
    return None


def create(base: Base, limit_bytes: int) -> CallGroup:
    """A fresh cgroup for one call, limited to `limit_bytes` of memory and no swap beyond it."""
    path = base.path / f"{PREFIX}{os.getpid()}-{next(_counter)}"
    path.mkdir(mode=0o755)
    group = CallGroup(path, base.version)
    try:
        if base.version == 1:
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            with contextlib.suppress(FileNotFoundError):  # memsw only with swap accounting on
                (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        else:
            (path / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(FileNotFoundError):
                (path / "memory.swap.max").write_text("0")
            with contextlib.suppress(FileNotFoundError):  # the call dies as a whole, not one random process
                (path / "memory.oom.group").write_text("1")
    except OSError:
        group.remove(0)
        raise
    return group
