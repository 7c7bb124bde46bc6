"""Layer 2: Landlock + seccomp, for hosts where user namespaces are refused (a restricted container).

A tiny launcher (launcher.py, run by the runtime's own python with -I -S) sets the rlimits,
PR_SET_NO_NEW_PRIVS, a Landlock ruleset (read: system directories, the skills; read-write: the
session's workspace and a private temporary directory; no TCP bind/connect on ABI >= 4; no signals
or abstract Unix sockets out of the domain on ABI >= 6) and a seccomp filter (socket() for AF_UNIX
only, no ptrace / process_vm_* / io_uring / namespaces / mounts / setsid / setpgid), then execs bash.

Unlike bwrap it cannot hide paths: the cwd is the workspace's real host path, and other sessions'
workspaces are denied (not invisible). setsid/setpgid are denied so that every descendant stays in
the call's process group, which the runner kills as a whole.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from services.runtime.sandbox.bwrap import ETC, PATH
from services.runtime.sandbox.types import SandboxLimits

LAUNCHER = Path(__file__).with_name("launcher.py")
# Passed with -c: the sandbox's uid may not be able to reach the repository (or a venv under /root);
# the interpreter is the system one under /usr, which the sandbox reads anyway.
LAUNCHER_SOURCE = LAUNCHER.read_text()
SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
             "/dev/zero", "/dev/urandom", "/dev/random", *(f"/etc/{e}" for e in ETC))


def landlock_abi() -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    try:
        return int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except OSError:
        return -1


def rlimits(limits: SandboxLimits) -> dict[str, int]:
    return {"RLIMIT_AS": limits.memory_bytes, "RLIMIT_CPU": limits.cpu_s, "RLIMIT_FSIZE": limits.file_bytes,
            "RLIMIT_NOFILE": limits.max_open_files, "RLIMIT_NPROC": limits.max_procs, "RLIMIT_CORE": 0}


def landlock_argv(command: str, limits: SandboxLimits, workspace_fd: int, skills_fd: int, tmp_fd: int,
                  skills_dir: Path, tmp: Path, tz: str, uid: int | None) -> list[str]:
    limits_arg = ",".join(f"{k}={v}" for k, v in rlimits(limits).items())
    return [python(), "-I", "-S", "-c", LAUNCHER_SOURCE, "" if uid is None else str(uid), str(workspace_fd),
            str(skills_fd), f"{workspace_fd},{tmp_fd}", "/dev/null", ":".join(SYSTEM_RO), limits_arg, command]


def env(skills_dir: Path, tmp: Path, tz: str) -> dict[str, str]:
    """The command's whole environment (the launcher passes its own on to bash)."""
    return {"PATH": PATH, "HOME": str(tmp), "TMPDIR": str(tmp), "LANG": "C.UTF-8", "TZ": tz, "TERM": "dumb",
            "GAMMA_SKILLS_DIR": str(skills_dir)}


def python() -> str:
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def available() -> str | None:
    """Why layer 2 cannot run here, or None."""
    if sys.platform != "linux":
        return "not Linux"
    abi = landlock_abi()
    if abi < 1:
        return "the kernel offers no Landlock (landlock_create_ruleset failed)"
    return None
