"""The per-user disk budget: what all of one user's sessions take on the session disk together
(workspaces, snapshots, transcripts, images), counted by blocks (a sparse file's holes take nothing)
and each inode once (a fork's snapshot objects are hard links to its source's). The workspace quota
bounds one session; without this, a user at the session cap could hold the cap times it, and every
fork multiplied it (docs/architecture.md "Limits on hostile input").

Checked where the proxy adds to a user's disk: a fork (the source's workspace is copied) and an upload
(the body's size). Past the budget: 507 naming it, and nothing is written. A measure walks every
session directory of the user (bounded in entries and time, in the I/O pool) and is reused for
CACHE_S, plus what was admitted since, so a run of uploads does not walk each time.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from services.proxy.deps import Proxy
from services.proxy.edge.errors import ApiError
from shared.redis import keys
from shared.storage.disk import session_paths

CACHE_S = 10.0
MAX_ENTRIES = 1_000_000  # per measure, all of a user's sessions
BUDGET_S = 10.0


@dataclass
class _Seen:
    at: float
    bytes: int


_cache: dict[str, _Seen] = {}


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


async def user_disk(proxy: Proxy, user: str) -> int:
    seen = _cache.get(user)
    if seen is not None and time.monotonic() - seen.at < CACHE_S:
        return seen.bytes
    ids = [m.decode() if isinstance(m, bytes) else str(m)
           for m in await proxy.redis.zrange(keys.user_sessions(user), 0, -1)]
    data_dir = proxy.settings.storage.data_dir
    total = await asyncio.to_thread(disk_of, [session_paths(data_dir, sid).root for sid in ids])
    _cache[user] = _Seen(time.monotonic(), total)
    return total


async def admit(proxy: Proxy, user: str, adding: int, what: str) -> None:
    """ApiError 507 when `adding` more bytes would take `user` past the budget; else count them."""
    budget = proxy.settings.storage.user_disk_bytes
    if budget <= 0:
        return
    used = await user_disk(proxy, user)
    if used + adding > budget:
        raise ApiError(507, f"{what} would take your sessions to {used + adding} bytes on disk; the budget of one "
                            f"user is {budget} bytes (GAMMA_USER_DISK_BYTES): delete files or sessions first")
    seen = _cache.get(user)
    if seen is not None:
        seen.bytes += adding


async def workspace_disk(proxy: Proxy, sid: str) -> int:
    """What a copy of `sid`'s workspace takes (a fork lays one out)."""
    return await asyncio.to_thread(disk_of, [session_paths(proxy.settings.storage.data_dir, sid).workspace])
