"""GET /sessions/{id}/export: a session's data as a .tar.gz (docs/architecture.md "Session lifecycle").

What goes in, under `{sid}/`: `session.json` (the row as GET /sessions/{id} shows it),
`transcript.jsonl` as stored (every entry, every branch), `todo.json`, `state.json` (the UI state),
`documents/**` and `workspace/**`. The archive is built into an unlinked temporary file first, so the
response has a `Content-Length` and a client can show progress; the files it reads are bounded by
GAMMA_EXPORT_MAX_BYTES (413 before anything is sent).

The workspace is the agent's and the user's: every name and link in it is hostile. The walk opens
each directory and file relative to its parent with O_NOFOLLOW, so a symlink (or one swapped in
during the walk) is never followed, and keeps only directories and regular files (links, FIFOs,
sockets and devices are skipped; a FIFO is opened non-blocking, so it cannot stall the export).
Names go into PAX headers as they are (bytes that are not UTF-8 survive as surrogate escapes);
modes are normalised (0644 / 0755, no owner), so an archive never carries setuid bits or a uid.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

CHUNK = 256 * 1024
TOP_FILES = ("transcript.jsonl", "todo.json", "state.json")
TOP_DIRS = ("documents", "workspace")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
MAX_DEPTH = 512  # directory fds held at once at most (GAMMA_WORKSPACE_MAX_DEPTH is at most 512)


class ExportTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the session's files exceed the export limit of {limit} bytes (GAMMA_EXPORT_MAX_BYTES)")


@dataclass
class _Budget:
    left: int
    limit: int

    def take(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise ExportTooLarge(self.limit)


def _info(name: str, size: int, mtime: float, directory: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = size, int(mtime)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add_file(tar: tarfile.TarFile, fd: int, name: str, budget: _Budget) -> None:
    """`fd` is open on the file (closed here); only a regular file is added, its size as of now."""
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return
        budget.take(st.st_size)
        tar.addfile(_info(name, st.st_size, st.st_mtime), _Exact(f, st.st_size))


class _Exact(io.RawIOBase):
    """Exactly `size` bytes of `f`: a file truncated in place while it is read is padded with zeros
    (a file replaced by a rename keeps the opened inode whole), one grown is cut at `size`."""

    def __init__(self, f: IO[bytes], size: int) -> None:
        self.f, self.left = f, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.f.read(n)
        data += b"\0" * (n - len(data))
        self.left -= n
        return data


def _children(dir_fd: int) -> Iterator[tuple[str, bool, bool]]:
    with os.scandir(dir_fd) as entries:
        listed = sorted((e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False))
                        for e in entries)
    return iter(listed)


def _add_tree(tar: tarfile.TarFile, dir_fd: int, name: str, budget: _Budget) -> None:
    """The tree under `dir_fd` (the caller's fd), iteratively with an explicit stack: however deep a
    command nested it, no recursion (shared/storage/walk.py has the same rule); directories past MAX_DEPTH
    levels are left out (the workspace bounds keep a tree far shallower: GAMMA_WORKSPACE_MAX_DEPTH)."""
    tar.addfile(_info(name, 0, os.fstat(dir_fd).st_mtime, directory=True))
    stack = [(os.dup(dir_fd), name, _children(dir_fd))]
    try:
        while stack:
            fd, path, children = stack[-1]
            item = next(children, None)
            if item is None:
                os.close(stack.pop()[0])
                continue
            child, is_dir, is_file = item
            if not (is_dir or is_file) or (is_dir and len(stack) >= MAX_DEPTH):
                continue  # symlinks and special files; a directory nested past the bound
            try:
                child_fd = os.open(child, _DIR_FLAGS if is_dir else _FILE_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a link, since the listing
            if not is_dir:
                _add_file(tar, child_fd, f"{path}/{child}", budget)
                continue
            stack.append((child_fd, f"{path}/{child}", iter(())))
            tar.addfile(_info(f"{path}/{child}", 0, os.fstat(child_fd).st_mtime, directory=True))
            stack[-1] = (child_fd, f"{path}/{child}", _children(child_fd))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _open_or_none(name: str, flags: int, dir_fd: int) -> int | None:
    """None for a missing entry, a symlink (ELOOP) or the wrong kind (ENOTDIR)."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return None


def build(root: Path, sid: str, session_json: bytes, max_bytes: int, spool_dir: Path) -> IO[bytes]:
    """The archive in an unlinked temporary file, positioned at 0. Raises ExportTooLarge."""
    spool_dir.mkdir(parents=True, exist_ok=True)
    out = tempfile.TemporaryFile(dir=spool_dir)  # noqa: SIM115 - handed to the response, closed after it
    try:
        budget = _Budget(max_bytes, max_bytes)
        with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT, encoding="utf-8",
                          errors="surrogateescape", compresslevel=6) as tar:
            tar.addfile(_info(sid, 0, 0, directory=True))
            tar.addfile(_info(f"{sid}/session.json", len(session_json), 0), io.BytesIO(session_json))
            root_fd = os.open(root, _DIR_FLAGS)
            try:
                for name in TOP_FILES:
                    fd = _open_or_none(name, _FILE_FLAGS, root_fd)
                    if fd is not None:
                        _add_file(tar, fd, f"{sid}/{name}", budget)
                for name in TOP_DIRS:
                    fd = _open_or_none(name, _DIR_FLAGS, root_fd)
                    if fd is not None:
                        try:
                            _add_tree(tar, fd, f"{sid}/{name}", budget)
                        finally:
                            os.close(fd)
            finally:
                os.close(root_fd)
        out.flush()
        out.seek(0)
        return out
    except BaseException:
        out.close()
        raise


def chunks(f: IO[bytes]) -> Iterator[bytes]:
    """Read by Starlette in its thread pool; the file is closed at the end (or when the client leaves)."""
    try:
        while block := f.read(CHUNK):
            yield block
    finally:
        f.close()
