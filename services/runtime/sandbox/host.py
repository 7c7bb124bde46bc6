"""What a sandboxed call needs on the host side: the user it runs as, the workspace handed to that
user, a private temporary directory (landlock), and the fds passed to the launcher or bwrap.

When the runtime runs as root (development, CI), the command must not: RLIMIT_NPROC is never
enforced for uid 0 (the kernel exempts INIT_USER, also through a user namespace mapped onto it), so
a fork bomb would be unbounded, and DAC would not help Landlock. The call then runs as a per-session
unprivileged uid (UID_BASE + a hash of the workspace path) and the workspace tree is handed to that
uid before each call (fwalk + lchown through dir fds: no symlink is ever followed). A non-root
runtime (the image runs as uid 10001) keeps its own uid: nothing is chowned.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from pathlib import Path

UID_BASE = 200_000
UID_SPAN = 100_000


def sandbox_uid(workspace: Path) -> int | None:
    if os.geteuid() != 0:
        return None
    return UID_BASE + zlib.crc32(str(workspace).encode()) % UID_SPAN


def hand_over(workspace: Path, uid: int | None) -> None:
    """Make the tree writable by the sandbox's uid (only entries it does not own yet)."""
    if uid is None:
        return
    _searchable(workspace.parent)
    top = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(top)
        if st.st_uid != uid or st.st_gid != uid:
            os.fchown(top, uid, uid)
        if st.st_mode & 0o077:
            os.fchmod(top, 0o700)  # other sessions' uids cannot even enter it
    finally:
        os.close(top)
    for _, dirs, files, dfd in os.fwalk(workspace, follow_symlinks=False):
        for name in (*dirs, *files):
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if st.st_uid != uid:
                    os.chown(name, uid, uid, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue


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


def remove_tmp(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


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
