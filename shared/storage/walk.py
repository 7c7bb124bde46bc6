"""The one walk of a session workspace: iterative, bounded, never following a link.

A sandboxed command shapes the workspace at will (docs/architecture.md "Trust boundaries"): a tree
thousands of levels deep, or tens of thousands of empty directories. Every walk of a workspace
(the change scan around `bash`, the quota, the projection of viewable files, the sandbox's hand-over,
a recursive delete) goes through here, so none can recurse past Python's stack or run unbounded:

- an explicit stack of directory fds (os.scandir on an fd, each child opened O_NOFOLLOW beneath its
  parent), so a directory renamed or swapped for a link mid-walk cannot lead out of the root;
- `max_depth` levels at most (the fds held at once), `max_entries` entries at most, and a time
  budget: past any of them the walk stops and says why (`Walk.stopped`), it never raises;
- entries deeper than `max_depth` are not descended into: the first ones found are named in
  `Walk.too_deep` so a caller can remove them (`remove_tree`).

The walk blocks on the disk: call it off the event loop (`asyncio.to_thread`, the service's I/O pool,
shared/pools/iopool.py).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.storage.pathnames import show

Kind = Literal["file", "directory", "symlink", "fifo", "socket", "device", "other"]
Stopped = Literal["entries", "time", "unreadable"]
TOO_DEEP_SHOWN = 64  # the too-deep entries named (each is a whole subtree for remove_tree)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def kind_of(mode: int) -> Kind:
    """The entry's real type, as listings report it."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


@dataclass(frozen=True)
class WalkLimits:
    max_entries: int
    max_depth: int
    budget_s: float

    @classmethod
    def from_settings(cls, settings: Any) -> WalkLimits:
        return cls(int(settings.storage.workspace_max_entries), int(settings.storage.workspace_max_depth),
                   float(settings.storage.workspace_walk_budget_s))


@dataclass(frozen=True)
class Entry:
    rel: str  # workspace-relative, "/"-separated, shown (shared/storage/pathnames.py: never a raw byte)
    kind: Kind
    size: int  # regular files only; 0 otherwise
    mtime_ns: int
    uid: int
    depth: int  # path components: "a" is 1, "a/b" 2
    disk: int = 0  # bytes of disk it takes (st_blocks): a sparse file's holes take none


@dataclass
class Walk:
    entries: list[Entry] = field(default_factory=list)
    stopped: Stopped | None = None  # why the walk ended early; None: every entry within depth is listed
    too_deep: list[str] = field(default_factory=list)  # entries past max_depth (not descended into)
    deeper: bool = False  # something lies past max_depth (too_deep may name only the first of them)

    @property
    def complete(self) -> bool:
        return self.stopped is None

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.entries)

    @property
    def disk(self) -> int:
        """Bytes on disk (blocks, every kind of entry): what the tree takes from the host's disk."""
        return sum(e.disk for e in self.entries)

    def files(self) -> dict[str, tuple[int, int]]:
        """Regular files: rel -> (mtime_ns, size), the change scan's stamp."""
        return {e.rel: (e.mtime_ns, e.size) for e in self.entries if e.kind == "file"}

    def describe(self, limits: WalkLimits) -> str:
        if self.stopped == "entries":
            return f"the workspace holds more than {limits.max_entries} entries (files, directories, links)"
        if self.stopped == "time":
            return f"walking the workspace took longer than {limits.budget_s:g} s"
        if self.stopped == "unreadable":
            return "the workspace cannot be read"
        if self.deeper:
            return f"the workspace nests deeper than {limits.max_depth} levels"
        return "the workspace is within its bounds"


Visit = Callable[[int, str, os.stat_result], None]  # (parent dir fd, name, lstat), the fd held during the call


@dataclass
class _Frame:
    fd: int
    prefix: str  # "" for the root, else "a/b/" (shown)
    depth: int  # of this directory (root 0)
    subdirs: list[str]


def _scan(frame: _Frame, out: Walk, limits: WalkLimits, visit: Visit | None,
          descend: Callable[[str], bool] | None) -> bool:
    """List one directory into `out`; False once max_entries is passed."""
    child_depth = frame.depth + 1
    with os.scandir(frame.fd) as it:  # scandir on an fd works on a dup of it
        for child in it:
            try:
                st = child.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed while we walked
                continue
            rel = frame.prefix + show(child.name)
            if child_depth > limits.max_depth:
                out.deeper = True
                if len(out.too_deep) < TOO_DEEP_SHOWN:
                    out.too_deep.append(rel)
                continue
            kind = kind_of(st.st_mode)
            out.entries.append(Entry(rel, kind, st.st_size if kind == "file" else 0, st.st_mtime_ns,
                                     st.st_uid, child_depth, st.st_blocks * 512))
            if len(out.entries) > limits.max_entries:
                out.stopped = "entries"
                return False
            if visit is not None:
                visit(frame.fd, child.name, st)
            if kind == "directory" and (descend is None or descend(rel)):
                frame.subdirs.append(child.name)
    frame.subdirs.reverse()  # popped from the end: listing order
    return True


def walk_fd(root_fd: int, limits: WalkLimits, visit: Visit | None = None,
            descend: Callable[[str], bool] | None = None) -> Walk:
    """Walk the tree under an open directory fd (the fd stays the caller's). `visit` sees every entry
    listed while its directory's fd is held; `descend(rel)` False lists a directory without entering it."""
    out = Walk()
    deadline = time.monotonic() + limits.budget_s
    stack = [_Frame(os.dup(root_fd), "", 0, [])]
    try:
        if not _scan(stack[0], out, limits, visit, descend):
            return out
        while stack:
            top = stack[-1]
            if not top.subdirs:
                os.close(stack.pop().fd)
                continue
            if time.monotonic() > deadline:
                out.stopped = "time"
                return out
            name = top.subdirs.pop()
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=top.fd)
            except OSError:  # gone, or swapped for a link or a file since it was listed
                continue
            frame = _Frame(fd, f"{top.prefix}{show(name)}/", top.depth + 1, [])
            stack.append(frame)
            try:
                if not _scan(frame, out, limits, visit, descend):
                    return out
            except OSError:
                continue
        return out
    except OSError:
        out.stopped = "unreadable"
        return out
    finally:
        for frame in stack:
            os.close(frame.fd)


def walk(workspace: os.PathLike[str] | str, limits: WalkLimits, visit: Visit | None = None,
         descend: Callable[[str], bool] | None = None) -> Walk:
    """Walk a workspace directory (a path the service built); a missing one is an empty walk."""
    try:
        fd = os.open(workspace, _DIR_FLAGS)
    except FileNotFoundError:
        return Walk()
    except OSError:
        return Walk(stopped="unreadable")
    try:
        return walk_fd(fd, limits, visit, descend)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- removing a tree


@dataclass
class Removal:
    removed: int = 0  # entries unlinked or rmdir'ed
    finished: bool = True  # False: the budget ran out (or the tree changed under us) before the end


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def remove_tree(parent_fd: int, name: str, *, budget_s: float, max_entries: int | None = None) -> Removal:
    """Remove `name` under `parent_fd` (a file, link or whole directory tree; a link is removed, never
    followed). Any depth: only one directory fd is held at a time; going back up re-opens `..` and
    checks it is the directory we came from (device and inode), so a rename under us stops the removal
    rather than sending it elsewhere. Each directory is listed once (an empty subdirectory is removed
    at once), so a wide tree costs one pass. Bounded by `budget_s` and, when given, `max_entries`."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return Removal()
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return Removal(removed=1)
    return _remove_dir(parent_fd, name, st, time.monotonic() + budget_s, max_entries)


def _remove_dir(parent_fd: int, name: str, st: os.stat_result, deadline: float, max_entries: int | None) -> Removal:
    out = Removal()
    expect_up = [os.fstat(parent_fd)]  # the identity of each directory above the current one
    pending: list[list[str] | None] = [None]  # per level: subdirectories still to enter (None: not listed)
    names = [name]
    cur = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        if not _same(os.fstat(cur), st):
            out.finished = False
            return out
        while True:
            if time.monotonic() > deadline or (max_entries is not None and out.removed >= max_entries):
                out.finished = False
                return out
            if pending[-1] is None:
                pending[-1] = _clear(cur, out)
            todo = pending[-1]
            if todo:  # descend
                sub = todo.pop()
                nxt = os.open(sub, _DIR_FLAGS, dir_fd=cur)
                expect_up.append(os.fstat(cur))
                os.close(cur)
                cur = nxt
                names.append(sub)
                pending.append(None)
                continue
            cur = _up(cur)  # cur is empty: go up and remove it
            if not _same(os.fstat(cur), expect_up.pop()):
                out.finished = False
                return out
            os.rmdir(names.pop(), dir_fd=cur)
            pending.pop()
            out.removed += 1
            if not names:
                return out
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.ENOTDIR, errno.ELOOP):
            raise
        out.finished = False
        return out
    finally:
        os.close(cur)


def _up(fd: int) -> int:
    """The parent of the directory `fd`, which is closed once the parent is open (on an error it stays
    open, the caller's to close)."""
    parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
    os.close(fd)
    return parent


def _clear(fd: int, out: Removal) -> list[str]:
    """Unlink the non-directories and remove the empty subdirectories of the directory; the
    subdirectories left (not empty) to enter."""
    with os.scandir(fd) as it:
        children = [(child.name, child.is_dir(follow_symlinks=False)) for child in it]
    left: list[str] = []
    for child, is_dir in children:
        try:
            if is_dir:
                os.rmdir(child, dir_fd=fd)
            else:
                os.unlink(child, dir_fd=fd)
            out.removed += 1
        except FileNotFoundError:
            continue
        except OSError as exc:
            if not (is_dir and exc.errno in (errno.ENOTEMPTY, errno.EEXIST)):
                raise
            left.append(child)
    return left
