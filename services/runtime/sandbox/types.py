"""The sandbox's pure interface: a command, a workspace and limits in; exit code, capped output, timing out."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from shared.storage.walk import WalkLimits

Layer = Literal["bwrap", "landlock", "off"]


class SandboxLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    memory_bytes: int = 1024 * 1024 * 1024  # RLIMIT_AS per process; the whole call's, tmpfs included (cgroup.py)
    cpu_s: int = 120  # RLIMIT_CPU per process
    max_procs: int = 256  # RLIMIT_NPROC: processes of the sandbox's user (in its own user namespace for bwrap)
    max_open_files: int = 256  # RLIMIT_NOFILE
    file_bytes: int = 100 * 1024 * 1024  # RLIMIT_FSIZE and the workspace byte quota checked after a call
    workspace_files: int = 2000  # the workspace file-count quota checked after a call
    workspace_entries: int = 10_000  # bounds of the workspace walks around a call (shared/storage/walk.py)
    workspace_depth: int = 64
    walk_budget_s: float = 5.0
    tmp_bytes: int = 64 * 1024 * 1024  # size of each private tmpfs (/tmp, HOME, /dev/shm under bwrap; landlock's /tmp)
    cgroup: str = "auto"  # where each call's memory cgroup is made: auto, off or a directory (cgroup.py)
    output_chars: int = 30_000  # what the caller keeps of stdout+stderr (head and tail)


class SandboxRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    command: str
    workspace: Path  # the session's workspace: the only writable place
    skills_dir: Path  # read-only, at /skills (bwrap) or its own path (landlock)
    limits: SandboxLimits = SandboxLimits()
    timeout: float = 60.0
    workspace_usage: tuple[int, int] | None = None  # (bytes on disk, entries) just before the call, if measured


class SandboxResult(BaseModel):
    exit_code: int | None
    output: str  # stdout and stderr interleaved, capped (head + tail) to limits.output_chars
    truncated: bool = False
    timed_out: bool = False
    aborted: bool = False
    duration: float = 0.0
    layer: Layer | None = None
    error: str | None = None  # the sandbox could not run the command at all (no working layer)
    stopped: str | None = None  # killed by the disk watchdog (watch.py): why, for the model
    memory_killed: int = 0  # processes the kernel killed at the call's memory limit (cgroup.py)


def walk_limits(limits: SandboxLimits) -> WalkLimits:
    return WalkLimits(limits.workspace_entries, limits.workspace_depth, limits.walk_budget_s)
