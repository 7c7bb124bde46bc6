"""One asyncio.Lock per session, kept only while a task holds or waits for it.

The worker serialises a session's wake and close under its lock (services/runtime/hosting/worker.py); a
lock kept for every session it ever served would grow with the sessions that come and go, which
the soak's flat-memory criterion rules out (bench/soak.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class SessionLocks:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # sid -> (lock, tasks holding or waiting)

    def __len__(self) -> int:
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def hold(self, sid: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(sid) or (asyncio.Lock(), 0)
        self._locks[sid] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            _, users = self._locks[sid]
            if users <= 1:
                del self._locks[sid]
            else:
                self._locks[sid] = (lock, users - 1)
