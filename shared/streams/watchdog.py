"""Consumer stall watchdog: a service whose reader stopped taking entries must stop being ready.

A FastStream subscriber that died (NOGROUP, an unexpected error) or a handler that never returns
leaves the group's `last-delivered-id` still while the stream grows, and /healthz, /readyz kept
answering 200 (fault suite: the digest stopped consuming `gamma:artifacts:changes`, 107 entries
waiting for minutes). The watchdog compares, per group this service created, the stream's last id
with the group's last-delivered id; when entries wait and the group has not moved for `stall_s`,
the group is reported stalled: /readyz fails and `on_stall` runs (the service exits, so its
supervisor restarts it and the claimer picks up what the stuck consumer held).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from shared.redis.redis_wire import parse_id, text
from shared.streams.bus import ensured_groups

log = structlog.get_logger()


async def waiting_positions(client: aioredis.Redis) -> dict[str, str]:
    """'stream (group)' -> the group's last-delivered id, for groups with undelivered entries."""
    out: dict[str, str] = {}
    for stream, group in sorted(ensured_groups(client)):
        last = await client.xrevrange(stream, count=1)
        if not last:
            continue
        newest = text(last[0][0])
        for info in await client.xinfo_groups(stream):
            if text(info["name"]) == group:
                delivered = text(info["last-delivered-id"])
                if parse_id(newest) > parse_id(delivered):
                    out[f"{stream} ({group})"] = delivered
    return out


def exit_process(stalled: list[str]) -> None:
    """Ask uvicorn for a normal shutdown; the supervisor (compose, Kubernetes, the test stack) restarts us."""
    log.error("consumer_stalled_exiting", groups=stalled)
    os.kill(os.getpid(), signal.SIGTERM)


class StallWatchdog:
    def __init__(self, client: aioredis.Redis, *, stall_s: float = 60.0, poll_s: float = 1.0,
                 on_stall: Callable[[list[str]], None] = exit_process) -> None:
        self._r = client
        self.stall_s = stall_s
        self.poll_s = poll_s
        self.on_stall = on_stall
        self.stalled: list[str] = []
        self._since: dict[str, tuple[str, float]] = {}  # group -> (last-delivered id, when first seen)

    async def check(self) -> list[str]:
        """One look; returns the groups stalled for longer than `stall_s`."""
        now = time.monotonic()
        waiting = await waiting_positions(self._r)
        since: dict[str, tuple[str, float]] = {}
        for name, delivered in waiting.items():
            prev = self._since.get(name)
            since[name] = prev if prev is not None and prev[0] == delivered else (delivered, now)
        self._since = since
        return sorted(name for name, (_, t0) in since.items() if now - t0 >= self.stall_s)

    async def run(self) -> None:
        while True:
            try:
                stalled = await self.check()
            except (RedisError, OSError):
                # Redis trouble is /readyz's ping's business; the readers wait too, so start over.
                self._since.clear()
            else:
                if stalled and not self.stalled:
                    self.stalled = stalled
                    self.on_stall(stalled)
            await asyncio.sleep(self.poll_s)
