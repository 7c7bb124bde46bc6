"""The per-session workspace quota (issue 15): bytes and files under one session's workspace.

One usage computation for every writer: the file tools and the HTTP PUT check before they write, and
`bash` (services/runtime/tools/bash.py) can check after each command with `workspace_usage`.
Files are every non-directory entry (regular files, links, FIFOs...); bytes are regular files' sizes.
The walk never follows a link and holds directory fds, so a command renaming things under it cannot
send it out of the workspace; it stops once the file count is over the quota (then the answer is
"over" whatever the rest holds), which bounds its cost.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.disk import InsufficientStorage


@dataclass(frozen=True)
class WorkspaceQuota:
    max_bytes: int
    max_files: int

    @classmethod
    def from_settings(cls, settings: Any) -> WorkspaceQuota:
        return cls(int(settings.workspace_max_bytes), int(settings.workspace_max_files))

    def describe(self) -> str:
        return f"the session's workspace quota is {self.max_bytes} bytes and {self.max_files} files"


@dataclass(frozen=True)
class Usage:
    bytes: int
    files: int
    complete: bool = True  # False: the walk stopped at the file quota

    def over(self, quota: WorkspaceQuota) -> bool:
        return self.bytes > quota.max_bytes or self.files > quota.max_files


class QuotaExceeded(InsufficientStorage):
    """507: the write would take the session's workspace over its quota."""


def usage_at(root_fd: int, quota: WorkspaceQuota | None = None) -> Usage:
    """Usage of the tree under an open directory fd."""
    total = files = 0
    stop = quota.max_files + 1 if quota is not None else None
    for _, dirs, names, dir_fd in os.fwalk(".", dir_fd=root_fd, follow_symlinks=False):
        for name in [*names, *dirs]:  # a link to a directory is listed in dirs (and not descended)
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:  # removed while we walked
                continue
            if stat.S_ISDIR(st.st_mode):
                continue
            files += 1
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
            if stop is not None and files >= stop:
                return Usage(total, files, complete=False)
    return Usage(total, files)


def workspace_usage(workspace: Path, quota: WorkspaceQuota | None = None) -> Usage:
    """Usage of a session's workspace (0 when it does not exist yet)."""
    try:
        fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return Usage(0, 0)
    try:
        return usage_at(fd, quota)
    finally:
        os.close(fd)


def check_write(usage: Usage, quota: WorkspaceQuota, *, rel: str, size: int, replaced: int, new_file: bool) -> None:
    """Refuse a write that grows the workspace over its quota. A write that does not grow it (an
    overwrite with fewer bytes) passes even over quota, so an over-full workspace can be cleaned up."""
    files = usage.files + (1 if new_file else 0)
    total = usage.bytes - replaced + size
    if new_file and files > quota.max_files:
        raise QuotaExceeded(f"workspace quota exceeded: writing {rel!r} would make {files} files; "
                            f"{quota.describe()}")
    if size > replaced and total > quota.max_bytes:
        raise QuotaExceeded(f"workspace quota exceeded: writing {rel!r} ({size} bytes) would bring the "
                            f"workspace to {total} bytes; {quota.describe()}")
