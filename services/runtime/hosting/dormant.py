"""A closing session's last steps once its own writes are done (session.py `close`): the lease goes,
then the announcements, unfenced since the lease is gone on purpose (docs/architecture.md
"Ownership: one writer per slice": whoever sees "dormant" may write dormant state)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

import structlog
from redis.exceptions import RedisError

from services.runtime.live.events import Outbox
from shared.contracts.streams.lifecycle import SessionDormant
from shared.redis import dormancy, keys
from shared.streams.trim import trim_acked

log = structlog.get_logger()


class Releasable(Protocol):
    """The session's lease (lease.py)."""

    sid: str

    @property
    def fence(self) -> int: ...

    async def release(self) -> None: ...


async def release_dormant(client: Any, lease: Releasable, outbox: Outbox, reason: str, stop_replies: Sequence[str],
                          retention_s: float) -> None:
    """Release the lease, then say so: the dormant status, SessionDormant, the Stops answered; the inbox
    trimmed to the unread and, unless the session is being erased, its streams scheduled to go."""
    sid = lease.sid
    await client.delete(keys.running(sid))
    await lease.release()
    await client.zrem(keys.RUNTIME_LIVE, sid)
    await outbox.event("status", {"status": "dormant", "running": False, "fence": lease.fence}, fenced=False)
    await outbox.bus(keys.LIFECYCLE, SessionDormant(session_id=sid, fence=lease.fence, reason=reason))
    log.info("session_dormant", session_id=sid, reason=reason)
    await answer_stops(outbox, stop_replies, 200, {"status": "dormant"})
    with contextlib.suppress(RedisError, OSError):  # best effort: a dormant inbox keeps only the unread
        await trim_acked(client, keys.inbox(sid))
    if reason == "delete":  # unscheduled, it only keeps its streams: the proxy erases it now (services/proxy/dormant/erase.py)
        return
    with contextlib.suppress(RedisError, OSError):
        # After the retention window the events stream and the drained inbox go (shared/redis/dormancy.py).
        await dormancy.schedule(client, sid, retention_s)


async def answer_stops(outbox: Outbox, request_ids: Sequence[str], status: int, body: dict[str, Any]) -> None:
    """After the release: unfenced (the lease is gone on purpose)."""
    for request_id in request_ids:
        with contextlib.suppress(Exception):  # the proxy answers 504 after its timeout
            await outbox.reply(request_id, status, body, fenced=False)
