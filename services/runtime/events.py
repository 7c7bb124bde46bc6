"""Outgoing messages of a session: events (XADD MAXLEN ~), replies, and the service-level streams."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel

from shared import keys
from shared.contracts.events import EventType, SessionEvent
from shared.contracts.inbox import InboxReply

EVENTS_MAXLEN = 10_000
REPLY_TTL_S = 60

# (stream, model) -> publish through the bus (FastStream) so consumers get the usual envelope.
BusPublish = Callable[[str, BaseModel], Awaitable[Any]]
# Raises LeaseLost unless the session's lease is ours at this instant (Lease.check).
Fence = Callable[[], Awaitable[None]]


async def _unfenced() -> None:
    return None


class Outbox:
    """Everything goes out fenced: a worker that lost the session's lease (or was paused past it)
    publishes nothing more for it. Only the announcements made after releasing the lease on
    purpose (the dormant status) pass `fenced=False`."""

    def __init__(self, client: aioredis.Redis, sid: str, bus: BusPublish, fence: Fence = _unfenced) -> None:
        self.client = client
        self.sid = sid
        self.bus = bus
        self.fence = fence

    async def event(self, type: EventType, data: dict[str, Any] | None = None,
                    also: Callable[[Any], Any] | None = None, *, fenced: bool = True) -> str:
        """XADD one event; `also` adds commands to the same round trip (a non-transactional pipeline)."""
        if fenced:
            await self.fence()
        ev = SessionEvent(type=type, session_id=self.sid, data=data or {})
        if also is None:
            entry = await self.client.xadd(keys.events(self.sid), {"data": ev.model_dump_json()},
                                           maxlen=EVENTS_MAXLEN, approximate=True)
        else:
            pipe = self.client.pipeline(transaction=False)
            pipe.xadd(keys.events(self.sid), {"data": ev.model_dump_json()}, maxlen=EVENTS_MAXLEN, approximate=True)
            also(pipe)
            entry = (await pipe.execute())[0]
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    async def reply(self, request_id: str, status: int, body: dict[str, Any]) -> None:
        key = keys.reply(self.sid, request_id)
        payload = InboxReply(request_id=request_id, status=status, body=body).model_dump_json()
        await self.fence()
        pipe = self.client.pipeline(transaction=True)
        pipe.rpush(key, payload)
        pipe.expire(key, REPLY_TTL_S)
        await pipe.execute()

    async def publish(self, stream: str, message: BaseModel) -> None:
        await self.fence()
        await self.bus(stream, message)
