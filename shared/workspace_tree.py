"""Removing a directory tree of a session workspace (`DELETE /workspace/files/{path}?recursive=1`,
live and dormant through shared/write_model.py), within the workspace's bounds (shared/walk.py).

Beneath the workspace as every workspace write (shared/workspace_fs.py): the directory holding the
tree is opened through held fds, the tree is removed through shared/walk.py's `remove_tree`, which
never follows a link and holds one directory fd at a time.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from shared.disk import Conflict
from shared.walk import WalkLimits, remove_tree, walk_fd
from shared.workspace_fs import entry_at


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
            files = _tree_files(at.dir_fd, at.norm.split("/"), limits)
        done = remove_tree(at.dir_fd, at.name, budget_s=limits.budget_s)
    norm = at.norm
    if not done.finished:
        raise Conflict(f"{norm!r} was not removed completely ({done.removed} entries removed): it changed "
                       f"meanwhile or took longer than {limits.budget_s:g} s; retry")
    return RemovedTree(norm, files, done.removed)


def _tree_files(dir_fd: int, parts: list[str], limits: WalkLimits) -> list[str]:
    """The regular files under the directory parts[-1] of dir_fd; a tree past the bounds is refused."""
    fd = os.open(parts[-1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    below = WalkLimits(limits.max_entries, max(limits.max_depth - len(parts), 0), limits.budget_s)
    try:
        tree = walk_fd(fd, below)
    finally:
        os.close(fd)
    if not tree.complete or tree.deeper:
        raise Conflict(f"{'/'.join(parts)!r} cannot be removed at once: {tree.describe(below)}")
    prefix = "/".join(parts) + "/"
    return [prefix + e.rel for e in tree.entries if e.kind == "file"]
