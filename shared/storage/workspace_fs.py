"""Workspace files opened beneath the workspace root, never through a link out of it.

A sandboxed command shares the workspace and can swap a directory for a symlink between a path
check and an open. So nothing here resolves a path and then opens it by name: every open is relative
to a directory fd already held, with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` where the
kernel offers it, else by walking one component at a time with O_NOFOLLOW and resolving symlinks here
against the held fds. Both follow the same rule: a relative link that stays beneath the workspace is
followed; an absolute link, or `..` above the root, is refused (400).

Writes are atomic: a temp file in the target's directory (opened by fd), fsync, rename within that
directory fd, fsync the directory. OS errors a retry cannot fix come out as DiskError (4xx/507).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shared.storage.disk import (
    Conflict,
    DiskError,
    NotFound,
    PathRefused,
    shown_path,
    split_workspace_path,
    storage_fault,
)
from shared.storage.leftovers import discard_temp, fd_path
from shared.storage.pathnames import show
from shared.storage.quota import WorkspaceQuota, check_depth, check_write, usage_at
from shared.storage.walk import kind_of

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
MAX_LINKS = 40  # as the kernel: more links than this in one path is a loop
TEMP_PREFIX, TEMP_SUFFIX = ".gamma-", ".tmp"
TEMP_NAME_BYTES = len(TEMP_PREFIX) + 16 + len(TEMP_SUFFIX)  # independent of the target's name


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _openat2(dir_fd: int, path: str, flags: int, mode: int = 0) -> int:
    if _SYS_OPENAT2 is None:
        raise OSError(errno.ENOSYS, "openat2 is not known on this architecture")
    how = _OpenHow(flags | os.O_CLOEXEC, mode, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    raw = os.fsencode(path)
    for _ in range(8):  # EAGAIN: a rename raced the lookup and the kernel asks for a retry
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd), ctypes.c_char_p(raw),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def _probe_openat2() -> bool:
    """Whether openat2 works here (a seccomp profile may refuse it with ENOSYS or EPERM)."""
    try:
        os.close(_openat2(-100, ".", os.O_RDONLY | os.O_DIRECTORY))  # AT_FDCWD
        return True
    except OSError:
        return False


# Tests set this False to run the per-component walk on a kernel that has openat2.
OPENAT2 = _probe_openat2()


# ---------------------------------------------------------------- errors


def disk_error(exc: OSError, rel: str) -> DiskError | None:
    """The 4xx for an OS error a retry cannot fix, the 507/503 of a full or failing disk; None for the others."""
    e = exc.errno
    if e in (errno.EXDEV, errno.ELOOP):
        return PathRefused(f"{rel!r} leads out of the workspace through a symbolic link (or a link loop)")
    if e == errno.ENAMETOOLONG:
        return PathRefused(f"{rel!r}: a name is too long")
    if e == errno.ENOENT:
        return NotFound(f"no file {rel!r} in the session workspace")
    if e == errno.EISDIR:
        return Conflict(f"{rel!r} is a directory")
    if e == errno.ENOTDIR:
        return Conflict(f"{rel!r}: a parent of it is a file, not a directory")
    if e in (errno.EEXIST, errno.ENOTEMPTY):
        return Conflict(f"{rel!r} changed while it was written")
    fault = storage_fault(exc, repr(rel) if rel else "")
    if fault is not None:
        return fault
    if e in (errno.ENXIO, errno.ENODEV):  # a socket (or a device without a driver) cannot be opened
        return Conflict(f"{rel!r} is not a regular file")
    if e in (errno.EACCES, errno.EPERM):
        return Conflict(f"{rel!r} cannot be written: {exc.strerror}")
    return None


@contextlib.contextmanager
def disk_errors(rel: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        mapped = disk_error(exc, rel)
        if mapped is None:
            raise
        raise mapped from exc


# ---------------------------------------------------------------- opening beneath a root


@contextlib.contextmanager
def workspace_root(workspace: Path, *, create: bool = False) -> Iterator[int]:
    """An fd of the workspace directory itself (a path the service built, not a client)."""
    if create:
        workspace.mkdir(parents=True, exist_ok=True)
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _walk(root_fd: int, parts: list[str], flags: int, *, create_dirs: bool = False) -> int:
    """Open `parts` beneath root_fd one component at a time (O_NOFOLLOW), following relative links
    by splicing their targets into the walk: the walk only ever moves through fds it holds, so a
    component swapped mid-walk cannot take it out of the root."""
    stack = [os.dup(root_fd)]
    pending = list(parts)
    links = 0
    try:
        while pending:
            name = pending.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) == 1:
                    raise OSError(errno.EXDEV, "'..' above the workspace", name)
                os.close(stack.pop())
                continue
            last = not pending
            want = flags if last else os.O_RDONLY | os.O_DIRECTORY
            try:
                fd = os.open(name, want | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=stack[-1])
            except OSError as exc:
                if exc.errno == errno.ENOENT and create_dirs:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=stack[-1])
                    pending.insert(0, name)
                    continue
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    target = os.readlink(name, dir_fd=stack[-1])
                except OSError:
                    raise exc from None  # not a link: the error stands
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many symbolic links", name) from None
                if target.startswith("/"):
                    raise OSError(errno.EXDEV, "absolute symbolic link", name) from None
                pending[:0] = target.split("/")
                continue
            if last:
                return fd
            stack.append(fd)
        return os.dup(stack[-1])  # the path named a directory already on the stack (e.g. "a/..")
    finally:
        for fd in stack:
            os.close(fd)


def open_beneath(root_fd: int, parts: list[str], flags: int) -> int:
    if not parts:
        return os.dup(root_fd)
    if OPENAT2:
        return _openat2(root_fd, "/".join(parts), flags)
    return _walk(root_fd, parts, flags)


def open_dir(root_fd: int, parts: list[str], *, create: bool = False) -> int:
    try:
        return open_beneath(root_fd, parts, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        if not create:
            raise
    return _walk(root_fd, parts, os.O_RDONLY | os.O_DIRECTORY, create_dirs=True)


# ---------------------------------------------------------------- reads


@dataclass
class Opened:
    """An open workspace entry: the caller owns fd (close it)."""

    fd: int
    rel: str
    st: os.stat_result

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)


def open_entry(workspace: Path, rel: str) -> Opened:
    """Open a file or a directory for reading; a FIFO, socket or device is refused, 409 "not a regular
    file" (opened O_NONBLOCK so a FIFO planted by a command cannot hang the caller; a socket fails the
    open with ENXIO). Device nodes cannot be made in a workspace: the sandbox's user has no CAP_MKNOD
    (services/runtime/sandbox)."""
    parts = split_workspace_path(rel)
    norm = shown_path(parts)
    with disk_errors(norm):
        if not workspace.is_dir():
            raise NotFound(f"no file {norm!r} in the session workspace")
        with workspace_root(workspace) as root:
            fd = open_beneath(root, parts, os.O_RDONLY | os.O_NONBLOCK)
    st = os.fstat(fd)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        os.close(fd)
        raise Conflict(f"{norm!r} is not a regular file")
    return Opened(fd, norm, st)


def read_bytes(workspace: Path, rel: str) -> bytes:
    opened = open_entry(workspace, rel)
    try:
        if opened.is_dir:
            raise Conflict(f"{opened.rel!r} is a directory")
        os.set_blocking(opened.fd, True)
        with os.fdopen(os.dup(opened.fd), "rb") as fh:
            return fh.read()
    finally:
        os.close(opened.fd)


def list_dir(fd: int, max_entries: int = 10_000) -> list[dict[str, object]]:
    """Entries of an open directory, links skipped (never followed), at most `max_entries` (the entry
    quota bounds a directory anyway). `type` is the entry's real type: file, directory, fifo, socket,
    device (shared/storage/walk.py `kind_of`); `name` is shown (shared/storage/pathnames.py: a name that is not UTF-8
    is escaped, never sent raw)."""
    entries: list[dict[str, object]] = []
    with os.scandir(fd) as it:  # scandir duplicates the fd
        for child in it:
            try:
                st = child.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            kind = kind_of(st.st_mode)
            if kind == "symlink":
                continue
            entries.append({"name": show(child.name), "type": kind, "size": st.st_size if kind == "file" else None})
            if len(entries) >= max_entries:
                break
    return sorted(entries, key=lambda e: str(e["name"]))


# ---------------------------------------------------------------- writes


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _atomic_write_at(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    for _ in range(8):
        tmp = TEMP_PREFIX + secrets.token_hex(8) + TEMP_SUFFIX
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, "no free temp name", name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)  # the umask narrowed it; keep an existing file's mode
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        discard_temp(fd_path(dir_fd) / tmp, lambda: os.unlink(tmp, dir_fd=dir_fd))
        raise
    os.fsync(dir_fd)



@dataclass(frozen=True)
class Written:
    path: str  # workspace-relative, NFC-normalised
    created: bool  # no entry existed at the path before this write


def write_bytes(workspace: Path, rel: str, data: bytes, *, quota: WorkspaceQuota | None = None,
                must_exist: bool = False) -> str:
    """Write a workspace file atomically beneath the workspace; returns its normalised path."""
    return write_entry(workspace, rel, data, quota=quota, must_exist=must_exist).path


def write_entry(workspace: Path, rel: str, data: bytes, *, quota: WorkspaceQuota | None = None,
                must_exist: bool = False) -> Written:
    """Write a workspace file atomically beneath the workspace, creating its directories as needed.

    must_exist: overwrite an existing regular file only (NotFound otherwise). quota: refuse (507)
    a write that would take the workspace over it; nothing is created when refused.
    """
    parts = split_workspace_path(rel, for_write=True)
    norm = shown_path(parts)
    with disk_errors(norm), workspace_root(workspace, create=not must_exist) as root:
        try:
            dir_fd: int | None = open_dir(root, parts[:-1])
        except FileNotFoundError:
            if must_exist:
                raise NotFound(f"no file {norm!r} to overwrite") from None
            dir_fd = None
        try:
            st = lstat_at(dir_fd, parts[-1]) if dir_fd is not None else None
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise Conflict(f"{norm!r} is a directory")
            regular = st is not None and stat.S_ISREG(st.st_mode)
            if must_exist and not regular:
                raise NotFound(f"no file {norm!r} to overwrite")
            if quota is not None:
                check_depth(parts, quota)
                new_dirs = _missing_dirs(root, parts) if dir_fd is None else 0
                check_write(usage_at(root, quota), quota, rel=norm, size=len(data),
                            replaced=st.st_size if st is not None and regular else 0, new_file=st is None,
                            new_dirs=new_dirs)
            if dir_fd is None:
                dir_fd = open_dir(root, parts[:-1], create=True)
            # An existing file keeps its permissions, never a setuid, setgid or sticky bit: the service
            # may run as root, and a file it writes is its own (docs/architecture.md "Workspace names").
            mode = st.st_mode & 0o777 if st is not None and regular else 0o644
            _atomic_write_at(dir_fd, parts[-1], data, mode)
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
    return Written(norm, st is None)


def _missing_dirs(root: int, parts: list[str]) -> int:
    """How many of the file's parent directories a write would create."""
    for have in range(len(parts) - 2, 0, -1):
        try:
            os.close(open_dir(root, parts[:have]))
            return len(parts) - 1 - have
        except FileNotFoundError:
            continue
    return len(parts) - 1
