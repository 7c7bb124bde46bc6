"""The per-session workspace quota: bytes, files and entries under one session's workspace, and how
deep it may nest.

One usage computation for every writer: the file tools and the HTTP PUT check before they write, and
`bash` (services/runtime/tools/bash.py) checks after each command. Entries are everything the
workspace holds (files, directories, links, FIFOs, sockets); files are the non-directory entries;
bytes are regular files' sizes. The measure is shared/storage/walk.py's bounded walk: it never follows a link,
stops once the entry count is over the quota (the answer is then "over" whatever the rest holds) and
within a time budget, so its cost is bounded whatever a command built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.storage.disk import InsufficientStorage, PathRefused
from shared.storage.walk import Walk, WalkLimits, walk, walk_fd


@dataclass(frozen=True)
class WorkspaceQuota:
    max_bytes: int
    max_files: int
    max_entries: int = 10_000
    max_depth: int = 64
    budget_s: float = 5.0  # the longest one measure of the workspace may take

    @classmethod
    def from_settings(cls, settings: Any) -> WorkspaceQuota:
        return cls(int(settings.storage.workspace_max_bytes), int(settings.storage.workspace_max_files),
                   int(settings.storage.workspace_max_entries), int(settings.storage.workspace_max_depth),
                   float(settings.storage.workspace_walk_budget_s))

    @property
    def limits(self) -> WalkLimits:
        return WalkLimits(self.max_entries, self.max_depth, self.budget_s)

    def describe(self) -> str:
        return (f"the session's workspace quota is {self.max_bytes} bytes, {self.max_files} files, "
                f"{self.max_entries} entries (files, directories, links) and {self.max_depth} levels deep")


@dataclass(frozen=True)
class Usage:
    bytes: int
    files: int
    entries: int = 0
    walk: Walk | None = None  # None: no workspace yet

    @classmethod
    def of(cls, w: Walk) -> Usage:
        files = sum(1 for e in w.entries if e.kind != "directory")
        return cls(w.bytes, files, len(w.entries), w)

    @property
    def complete(self) -> bool:
        return self.walk is None or self.walk.complete

    def over_counts(self, quota: WorkspaceQuota) -> bool:
        """Over the bytes, files or entries (or too large to be measured)."""
        return (self.bytes > quota.max_bytes or self.files > quota.max_files or self.entries > quota.max_entries
                or not self.complete)

    def over(self, quota: WorkspaceQuota) -> bool:
        return self.over_counts(quota) or (self.walk is not None and self.walk.deeper)


class QuotaExceeded(InsufficientStorage):
    """507: the write would take the session's workspace over its quota (or it cannot be measured)."""


def usage_at(root_fd: int, quota: WorkspaceQuota) -> Usage:
    """Usage of the tree under an open directory fd."""
    return Usage.of(walk_fd(root_fd, quota.limits))


def workspace_usage(workspace: Path, quota: WorkspaceQuota) -> Usage:
    """Usage of a session's workspace (0 when it does not exist yet)."""
    if not os.path.lexists(workspace):
        return Usage(0, 0)
    return Usage.of(walk(workspace, quota.limits))


def check_depth(parts: list[str], quota: WorkspaceQuota) -> None:
    """A path nesting deeper than the quota's depth can never be written: 400 before any I/O."""
    if len(parts) > quota.max_depth:
        raise PathRefused(f"path nests {len(parts)} levels deep; the workspace allows {quota.max_depth}")


def check_write(usage: Usage, quota: WorkspaceQuota, *, rel: str, size: int, replaced: int, new_file: bool,
                new_dirs: int = 0) -> None:
    """Refuse a write that grows the workspace over its quota. A write that does not grow it (an
    overwrite with fewer bytes) passes even over quota, so an over-full workspace can be cleaned up.
    `new_dirs`: the directories the write creates on the way to the file (entries too)."""
    if usage.walk is not None and usage.walk.stopped == "time":
        raise QuotaExceeded(f"workspace quota: the workspace could not be measured within "
                            f"{quota.budget_s:g} s writing {rel!r}; remove entries and retry")
    files = usage.files + (1 if new_file else 0)
    entries = usage.entries + (1 if new_file else 0) + new_dirs
    total = usage.bytes - replaced + size
    if new_file and files > quota.max_files:
        raise QuotaExceeded(f"workspace quota exceeded: writing {rel!r} would make {files} files; "
                            f"{quota.describe()}")
    if new_file and (entries > quota.max_entries or not usage.complete):
        raise QuotaExceeded(f"workspace quota exceeded: writing {rel!r} would make more than "
                            f"{quota.max_entries} entries; {quota.describe()}")
    if size > replaced and total > quota.max_bytes:
        raise QuotaExceeded(f"workspace quota exceeded: writing {rel!r} ({size} bytes) would bring the "
                            f"workspace to {total} bytes; {quota.describe()}")
