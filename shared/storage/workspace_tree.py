"""Removing a file or a directory tree of a session workspace (`DELETE /workspace/files/{path}?recursive=1`,
live and dormant through shared/ui/write_model.py), within the workspace's bounds (shared/storage/walk.py).

Beneath the workspace as every workspace write (shared/storage/workspace_fs.py): the directory holding the
tree is opened through held fds, the tree is removed through shared/storage/walk.py's `remove_tree`, which
never follows a link and holds one directory fd at a time.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shared.storage.disk import Conflict, NotFound, shown_path, split_workspace_path
from shared.storage.walk import WalkLimits, remove_tree, walk_fd
from shared.storage.workspace_fs import disk_errors, lstat_at, open_dir, workspace_root


@dataclass(frozen=True)
class EntryAt:
    dir_fd: int  # the directory holding the entry, opened beneath the workspace
    name: str
    norm: str  # workspace-relative, NFC-normalised
    st: os.stat_result  # the entry's own lstat (a link is never followed)


@contextlib.contextmanager
def entry_at(workspace: Path, rel: str) -> Iterator[EntryAt]:
    """An existing workspace entry, for removing it: its directory held open beneath the workspace (a
    missing entry or workspace is a 404, disk errors map as every write's do); the directory is
    fsync'd once the body is done, so the removal is durable."""
    parts = split_workspace_path(rel, for_write=True, escapes=True)  # a listed name can be removed
    norm = shown_path(parts)
    missing = f"no file {norm!r} in the session workspace"
    with disk_errors(norm):
        if not workspace.is_dir():
            raise NotFound(missing)
        with workspace_root(workspace) as root:
            dir_fd = open_dir(root, parts[:-1])
            try:
                st = lstat_at(dir_fd, parts[-1])
                if st is None:
                    raise NotFound(missing)
                yield EntryAt(dir_fd, parts[-1], norm, st)
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def remove_entry(workspace: Path, rel: str) -> str:
    """Remove one workspace file (or a link or other non-directory entry itself: a link is removed,
    never followed to its target) beneath the workspace; returns its normalised path. A directory is
    a 409, a missing entry a 404."""
    with entry_at(workspace, rel) as at:
        if stat.S_ISDIR(at.st.st_mode):
            raise Conflict(f"{at.norm!r} is a directory; only files can be deleted")
        os.unlink(at.name, dir_fd=at.dir_fd)
    return at.norm


@dataclass(frozen=True)
class RemovedTree:
    path: str  # workspace-relative, NFC-normalised
    files: list[str]  # the regular files that were in it (each is a deleted file for the digest)
    entries: int  # everything removed, directories included


def remove_tree_entry(workspace: Path, rel: str, limits: WalkLimits) -> RemovedTree:
    """Remove a directory and everything under it (or one non-directory entry), beneath the workspace.
    Within the workspace's bounds: the tree is walked first (at most `limits.max_entries` entries,
    `limits.max_depth` levels, `limits.budget_s`) and a tree past them is a 409 with nothing removed;
    the removal itself gets the same budget (a tree a command grows meanwhile may be left partly
    removed: a 409 says so, and a retry finishes it)."""
    with entry_at(workspace, rel) as at:
        files = [at.norm] if stat.S_ISREG(at.st.st_mode) else []
        if stat.S_ISDIR(at.st.st_mode):
            files = _tree_files(at.dir_fd, at.name, at.norm, limits)
        done = remove_tree(at.dir_fd, at.name, budget_s=limits.budget_s)
    norm = at.norm
    if not done.finished:
        raise Conflict(f"{norm!r} was not removed completely ({done.removed} entries removed): it changed "
                       f"meanwhile or took longer than {limits.budget_s:g} s; retry")
    return RemovedTree(norm, files, done.removed)


def _tree_files(dir_fd: int, name: str, norm: str, limits: WalkLimits) -> list[str]:
    """The regular files (shown paths) under the directory `name` of dir_fd, shown as `norm`; a tree
    past the bounds is refused."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    below = WalkLimits(limits.max_entries, max(limits.max_depth - norm.count("/") - 1, 0), limits.budget_s)
    try:
        tree = walk_fd(fd, below)
    finally:
        os.close(fd)
    if not tree.complete or tree.deeper:
        raise Conflict(f"{norm!r} cannot be removed at once: {tree.describe(below)}")
    prefix = norm + "/"
    return [prefix + e.rel for e in tree.entries if e.kind == "file"]
