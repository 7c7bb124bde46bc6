"""Acking inbox entries once their effect is durable. A failed ack never undoes the effect or stops
a run: it is retried in the background, and until it lands a redelivery is deduplicated."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog
from redis.exceptions import RedisError

log = structlog.get_logger()
# Failures that may pass (a Redis restart, a dropped connection): retried, never dead-lettered.
TRANSIENT = (RedisError, OSError)
AckFn = Callable[[str, str], Awaitable[None]]  # (sid, entry_id)


class Acker:
    def __init__(self, sid: str, ack: AckFn, background: set[asyncio.Task[None]]) -> None:
        self.sid = sid
        self._ack = ack
        self.background = background  # the session's background tasks (cancelled at shutdown)

    async def ack(self, entry_id: str | None) -> None:
        if not entry_id:
            return
        try:
            await self._ack(self.sid, entry_id)
        except TRANSIENT:
            log.warning("ack_failed_retrying", session_id=self.sid, entry_id=entry_id)
            t = asyncio.ensure_future(self._ack_later(entry_id))
            self.background.add(t)
            t.add_done_callback(self.background.discard)

    async def _ack_later(self, entry_id: str) -> None:
        delay = 0.2
        for _ in range(12):
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            with contextlib.suppress(*TRANSIENT):
                await self._ack(self.sid, entry_id)
                return
