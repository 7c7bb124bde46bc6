"""The disk watchdog of a sandboxed call: the workspace quota enforced while the command runs.

RLIMIT_FSIZE stops any one file at the byte quota, but not many files: without this, a call could
write 30 times its quota in seconds and fill the host's disk before the check after the call. There is
no per-directory quota the kernel enforces without device-mapper, a loop image or project quotas, so
the runtime watches: each bounded tree (the workspace; under landlock also the private temporary
directory, which lies on the host's disk) has a ceiling of bytes on disk (blocks: a sparse file's
holes take nothing) and of entries. Every SAMPLE_S the file system's own counters (statvfs: used
blocks and inodes, one cheap call) say how much anything on it grew since the call began; only once
that growth could take the tree past a ceiling is the tree walked (shared/storage/walk.py, bounded), and the
tree is walked anyway every WALK_S in case something else on the disk shrank meanwhile. Past a ceiling
the call is killed as a whole (runner.py) and its result says so. What a call can write beyond the
ceiling is its write rate for about SAMPLE_S plus one walk.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shared.storage.walk import WalkLimits, walk

SAMPLE_S = 0.1
WALK_S = 2.0


@dataclass(frozen=True)
class Bound:
    path: Path
    max_disk: int  # bytes on disk the tree may take
    max_entries: int
    what: str  # "the workspace", for the message
    start: tuple[int, int] | None = None  # (bytes on disk, entries) when the call began, if known: no walk then


@dataclass(frozen=True)
class Tripped:
    bound: Bound
    disk: int
    entries: int
    complete: bool  # False: the walk stopped at its entry bound (there are more)

    def message(self) -> str:
        b = self.bound
        if self.disk > b.max_disk:
            return (f"[stopped: the call was killed when {b.what} reached {self.disk} bytes on disk while it ran "
                    f"(its quota is {b.max_disk} bytes)]")
        return (f"[stopped: the call was killed when {b.what} passed {b.max_entries} entries while it ran "
                f"({'more than ' if not self.complete else ''}{self.entries})]")


def _fs_used(path: Path) -> tuple[int, int]:
    """(bytes, inodes) in use on the file system holding `path`."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree


def measure(bound: Bound, limits: WalkLimits) -> Tripped:
    w = walk(bound.path, WalkLimits(bound.max_entries, limits.max_depth, limits.budget_s))
    return Tripped(bound, w.disk, len(w.entries), w.complete)


class _Tree:
    """One bound's state: the tree's usage at the last walk and the disk's counters then. The ceilings
    are the bound's, or what the tree already held when the call began (a workspace left over quota
    can still be cleaned up by a command: only growth past both is stopped)."""

    def __init__(self, bound: Bound, limits: WalkLimits) -> None:
        self.bound, self.limits = bound, limits
        self.disk = self.entries = 0
        self.max_disk, self.max_entries = bound.max_disk, bound.max_entries
        self.fs = (0, 0)
        self.walked = 0.0

    def start(self) -> None:
        self.fs = _fs_used(self.bound.path)
        if self.bound.start is not None:
            disk, entries = self.bound.start
        else:
            t = measure(self.bound, self.limits)
            disk, entries = t.disk, t.entries
        self.max_disk, self.max_entries = max(self.max_disk, disk), max(self.max_entries, entries)
        self.disk, self.entries, self.walked = disk, entries, time.monotonic()

    def refresh(self) -> Tripped | None:
        fs = _fs_used(self.bound.path)
        t = measure(self.bound, self.limits)
        self.disk, self.entries, self.fs, self.walked = t.disk, t.entries, fs, time.monotonic()
        return t if t.disk > self.max_disk or t.entries > self.max_entries else None

    def check(self) -> Tripped | None:
        """Walk only when the disk grew enough to matter, or WALK_S since the last walk."""
        used, inodes = _fs_used(self.bound.path)
        grew = used - self.fs[0] > self.max_disk - self.disk
        more = inodes - self.fs[1] > self.max_entries - self.entries
        if grew or more or time.monotonic() - self.walked >= WALK_S:
            return self.refresh()
        return None


async def watch(bounds: list[Bound], limits: WalkLimits) -> Tripped:
    """Returns once a tree is past its ceiling (the caller then kills the call); runs until cancelled."""
    trees = [_Tree(b, limits) for b in bounds]
    for tree in trees:
        if tree.bound.start is not None:  # one statvfs: no thread hop for the many calls shorter than a sample
            _safe(tree.start)
        else:
            await asyncio.to_thread(_safe, tree.start)
    while True:
        await asyncio.sleep(SAMPLE_S)
        for tree in trees:
            tripped = await asyncio.to_thread(_safe, tree.check)
            if tripped is not None:
                return tripped


def _safe(step: Callable[[], Tripped | None]) -> Tripped | None:
    """A tree that cannot be measured (removed, unreadable) trips nothing: the check after the call decides."""
    try:
        return step()
    except OSError:
        return None
