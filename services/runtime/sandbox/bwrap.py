"""Layer 1: bubblewrap. New user/pid/ipc/uts/cgroup/net namespaces, a minimal read-only root, the
workspace as the only writable bind at /workspace, the skills read-only at /skills, a private tmpfs
/tmp, HOME and /dev/shm of a bounded size each (the root and /dev tmpfs read-only), a fresh /proc, a
cleared environment.

The command runs as pid 1 of its pid namespace (--as-pid-1): when it returns, or when the outer
bwrap is killed (--die-with-parent), the kernel kills everything else in the namespace, so
background children, setsid/nohup daemons and double forks never outlive the call. The rlimits are
set by a one-line `ulimit` prologue of the same bash (no extra exec): bwrap has no rlimit flags, and
RLIMIT_NPROC must be set inside the new user namespace (per-namespace counts since Linux 5.14), not
on bwrap, or one sandbox's processes would count against every other's.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from services.runtime.sandbox.types import SandboxLimits

WORKSPACE = "/workspace"
SKILLS = "/skills"
HOME = "/home/agent"
INNER_UID = 1000
# /etc entries programs need (dynamic loader, users, TLS roots, time zone, Debian's alternatives).
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
       "ssl", "ca-certificates", "ca-certificates.conf", "localtime", "timezone", "mime.types", "protocols",
       "services", "hosts", "os-release", "debian_version", "python3", "bash.bashrc", "inputrc")
SYSTEM = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # symlinks into /usr on merged-/usr systems
PATH = "/usr/local/bin:/usr/bin:/bin"


def bwrap_binary() -> str | None:
    for d in ("/usr/bin", "/bin", "/usr/local/bin"):
        if os.access(f"{d}/bwrap", os.X_OK):
            return f"{d}/bwrap"
    return None


def _etc_snapshot() -> str:
    """The /etc entries of ETC copied into a directory of their own (symlinks kept as symlinks), bound
    as the sandbox's whole /etc: one bind mount instead of ~20 costs ~2.5 ms less per call. Shared by the
    runtime processes of one uid (built once, renamed into place); one owned by anybody else, or
    writable by others, is never used."""
    shared = Path(tempfile.gettempdir()) / f"gamma-sandbox-etc-{os.geteuid()}"
    try:
        st = os.lstat(shared)
        if st.st_uid == os.geteuid() and not st.st_mode & 0o022 and os.path.isdir(shared) \
                and not os.path.islink(shared):
            return str(shared)
    except FileNotFoundError:
        pass
    target = Path(tempfile.mkdtemp(prefix="gamma-sandbox-etc-"))
    for name in ETC:
        src = Path("/etc") / name
        try:
            if src.is_symlink():
                os.symlink(os.readlink(src), target / name)
            elif src.is_dir():
                shutil.copytree(src, target / name, symlinks=True)
            elif src.is_file():
                shutil.copy2(src, target / name)
        except OSError:
            continue
    os.chmod(target, 0o755)  # the sandbox's unprivileged uid must be able to enter it
    try:
        os.rename(target, shared)
        return str(shared)
    except OSError:  # another process won the race, or a stranger's entry is in the way: keep ours
        atexit.register(shutil.rmtree, target, True)
        return str(target)


_root: list[str] = []


def root_args() -> list[str]:
    """The read-only root: /usr, the merged-/usr symlinks (or the directories) and the /etc snapshot."""
    if not _root:
        args = ["--ro-bind", "/usr", "/usr"]
        for name in SYSTEM:
            path = Path("/") / name
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), f"/{name}"]
            elif path.is_dir():
                args += ["--ro-bind", str(path), f"/{name}"]
        _root.extend([*args, "--ro-bind", _etc_snapshot(), "/etc"])
    return _root


def ulimit_prologue(limits: SandboxLimits) -> str:
    """Soft and hard limits at once (the command cannot raise them back); bash counts -v and -f in KiB."""
    return (f"ulimit -t {limits.cpu_s} -v {limits.memory_bytes // 1024} -f {max(limits.file_bytes // 1024, 1)} "
            f"-n {limits.max_open_files} -u {limits.max_procs} -c 0 || exit 125\n")


def env(tz: str) -> dict[str, str]:
    return {"PATH": PATH, "HOME": HOME, "LANG": "C.UTF-8", "TZ": tz, "TERM": "dumb", "GAMMA_SKILLS_DIR": SKILLS,
            "TMPDIR": "/tmp"}


def seccomp_fd() -> int:
    """A pipe holding the BPF program for --seccomp (read once by bwrap): no ptrace, process_vm_*,
    io_uring, namespaces, mounts, bpf, keyrings, perf, userfaultfd, modules; the caller passes and closes it."""
    read, write = os.pipe()
    try:
        os.write(write, _program())
    finally:
        os.close(write)
    return read


_programs: list[bytes] = []


def _program() -> bytes:
    if not _programs:
        from services.runtime.sandbox.launcher import seccomp_program

        _programs.append(seccomp_program(os.uname().machine, namespaced=True))
    return _programs[0]


def bwrap_argv(binary: str, command: str, limits: SandboxLimits, workspace_fd: int, skills_fd: int,
               tz: str, proc: bool = True, seccomp: int | None = None) -> list[str]:
    """proc=False: no /proc at all, for containers whose masked /proc forbids mounting a fresh one
    (Kubernetes without `procMount: Unmasked`); the probe tries that after a failed fresh /proc."""
    argv = [binary, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
            "--unshare-cgroup-try", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1",
            "--uid", str(INNER_UID), "--gid", str(INNER_UID), "--hostname", "sandbox", *root_args(),
            *(["--proc", "/proc"] if proc else []), "--dev", "/dev",
            "--size", str(limits.tmp_bytes), "--tmpfs", "/dev/shm",
            "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
            "--size", str(limits.tmp_bytes), "--tmpfs", HOME,
            "--ro-bind-fd", str(skills_fd), SKILLS,
            "--bind-fd", str(workspace_fd), WORKSPACE,
            # bwrap's own tmpfs under / and /dev have no size (half the host's RAM) and belong to the
            # command's uid: read-only once every mount point is made, so only the sized ones take writes.
            "--remount-ro", "/dev", "--remount-ro", "/",
            "--chdir", WORKSPACE, "--clearenv",
            *(["--seccomp", str(seccomp)] if seccomp is not None else [])]
    for key, value in env(tz).items():
        argv += ["--setenv", key, value]
    return [*argv, "--", "/bin/bash", "-c", ulimit_prologue(limits) + command]
