"""What a sandboxed call needs on the host side: the user it runs as, the workspace handed to that
user, a private temporary directory (landlock), and the fds passed to the launcher or bwrap.

When the runtime runs as root (development, CI), the command must not: RLIMIT_NPROC is never
enforced for uid 0 (the kernel exempts INIT_USER, also through a user namespace mapped onto it), so
a fork bomb would be unbounded, and DAC would not help Landlock. The call then runs as a per-session
unprivileged uid (UID_BASE + a hash of the workspace path) and the workspace tree is handed to that
uid before each call (shared/storage/walk.py's bounded walk + lchown through dir fds: no symlink is ever
followed). A non-root
runtime (the image runs as uid 10001) keeps its own uid: nothing is chowned.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import zlib
from pathlib import Path

from shared.storage.walk import Walk, WalkLimits, remove_tree, walk_fd

UID_BASE = 200_000
UID_SPAN = 100_000


def sandbox_uid(workspace: Path) -> int | None:
    if os.geteuid() != 0:
        return None
    return UID_BASE + zlib.crc32(str(workspace).encode()) % UID_SPAN


def hand_over(workspace: Path, uid: int | None, limits: WalkLimits) -> Walk | None:
    """Make the tree writable by the sandbox's uid (only entries it does not own yet), through the
    bounded walk (shared/storage/walk.py): a tree past the bounds is handed over as far as the walk got (what
    the sandbox made, it owns already). Blocks on the disk: the caller runs it in the I/O pool."""
    if uid is None:
        return None
    _searchable(workspace.parent)
    top = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(top)
        if st.st_uid != uid or st.st_gid != uid:
            os.fchown(top, uid, uid)
        if st.st_mode & 0o077:
            os.fchmod(top, 0o700)  # other sessions' uids cannot even enter it

        def own(dir_fd: int, name: str, entry: os.stat_result) -> None:
            if entry.st_uid != uid:
                with contextlib.suppress(FileNotFoundError):
                    os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)

        return walk_fd(top, limits, visit=own)
    finally:
        os.close(top)


def _searchable(path: Path) -> None:
    """bwrap, running as the sandbox's uid, resolves the workspace's path: every ancestor needs the
    search bit for others (o+x: enter, not list). What lies there stays hidden by the mount namespace
    (bwrap) or denied by Landlock and by its owner's mode (landlock)."""
    for d in (path, *path.parents):
        st = os.stat(d)
        if not st.st_mode & 0o001:
            os.chmod(d, (st.st_mode & 0o7777) | 0o001)


def private_tmp(uid: int | None) -> Path:
    path = Path(tempfile.mkdtemp(prefix="gamma-sandbox-"))
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def remove_tmp(path: Path, budget_s: float = 30.0) -> None:
    """Remove the private temporary directory, however deep the call nested it (shared/storage/walk.py)."""
    with contextlib.suppress(OSError):
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            remove_tree(parent, path.name, budget_s=budget_s)
        finally:
            os.close(parent)


def open_dir(path: Path) -> int:
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def as_user(argv: list[str], uid: int | None) -> list[str]:
    """argv run as `uid` (a root runtime). setpriv (util-linux) rather than Popen(user=...): with a
    uid to set, CPython forks the whole runtime instead of using vfork, ~10 ms more per call."""
    if uid is None:
        return argv
    setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
    if setpriv is None:
        raise OSError("setpriv (util-linux) is needed to run the sandbox as an unprivileged user")
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
