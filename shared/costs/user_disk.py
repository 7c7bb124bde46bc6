"""The per-user disk budget's measure and rule, shared by every service that adds to a user's disk
(docs/architecture.md "Limits on hostile input"): the proxy (uploads, dormant writes, document writes,
forks) and the runtime (the agent's writes and edits, each bash call).

What all of one user's sessions take on the session disk together (workspaces, snapshots,
transcripts, images), counted by blocks (a sparse file's holes take nothing) and each inode once (a
fork's or a snapshot's objects are hard links). A measure walks every session directory of the user
(bounded in entries and time; callers run it in the I/O pool) and is reused for CACHE_S, plus what
was admitted since, so a run of writes does not walk each time.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.redis import keys
from shared.storage.disk import session_paths

CACHE_S = 10.0
MAX_ENTRIES = 1_000_000  # per measure, all of a user's sessions
BUDGET_S = 10.0


def disk_of(roots: list[Path], max_entries: int = MAX_ENTRIES, budget_s: float = BUDGET_S) -> int:
    """Bytes on disk under `roots` (blocks), each inode once, links never followed; a tree past the
    bounds counts what was seen (a lower bound)."""
    seen: set[tuple[int, int]] = set()
    total = n = 0
    deadline = time.monotonic() + budget_s
    stack = [str(r) for r in roots if r.is_dir() and not r.is_symlink()]
    while stack and n < max_entries and time.monotonic() < deadline:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    n += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def refusal(what: str, used: int, adding: int, budget: int) -> str | None:
    """Why `adding` more bytes to a user at `used` is refused (a 507's text), or None (no budget: 0)."""
    if budget <= 0 or used + adding <= budget:
        return None
    return (f"{what} would take your sessions to {used + adding} bytes on disk; the budget of one user is "
            f"{budget} bytes (GAMMA_USER_DISK_BYTES): delete files or sessions first")


@dataclass
class _Seen:
    at: float
    bytes: int


@dataclass
class UserDisk:
    """One process's measures of its users' disk, each reused for CACHE_S."""

    data_dir: Path
    cache_s: float = CACHE_S
    _seen: dict[str, _Seen] = field(default_factory=dict)

    async def used(self, redis: Any, user: str) -> int:
        seen = self._seen.get(user)
        if seen is not None and time.monotonic() - seen.at < self.cache_s:
            return seen.bytes
        ids = [m.decode() if isinstance(m, bytes) else str(m)
               for m in await redis.zrange(keys.user_sessions(user), 0, -1)]
        total = await asyncio.to_thread(disk_of, [session_paths(self.data_dir, sid).root for sid in ids])
        for old in [u for u, s in self._seen.items() if time.monotonic() - s.at >= self.cache_s]:
            del self._seen[old]  # nothing kept per user past its measure's use
        self._seen[user] = _Seen(time.monotonic(), total)
        return total

    async def admit(self, redis: Any, user: str, adding: int, what: str, budget: int) -> str | None:
        """Why not (507's text), or None and `adding` counted until the next measure."""
        if budget <= 0:
            return None
        why = refusal(what, await self.used(redis, user), adding, budget)
        if why is None and (seen := self._seen.get(user)) is not None:
            seen.bytes += adding
        return why

    def forget(self, user: str) -> None:
        """The next check measures again: a change of a size not known here (a bash call, and the
        snapshot that copies what it changed)."""
        self._seen.pop(user, None)


_MEASURES: dict[tuple[int, Path], UserDisk] = {}


def measures(data_dir: Path) -> UserDisk:
    """This process's measures of the users of `data_dir` (a forked process gets its own)."""
    return _MEASURES.setdefault((os.getpid(), data_dir), UserDisk(data_dir))
