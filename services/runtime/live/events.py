"""Outgoing messages of a session: events (XADD MAXLEN ~), replies, and the service-level streams."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from pydantic import BaseModel

from services.runtime.live.sender import EVENTS_MAXLEN, Also, EventSender, Fence
from shared.contracts.streams.events import EventType, SessionEvent
from shared.contracts.streams.inbox import InboxReply
from shared.redis import keys

log = structlog.get_logger()
REPLY_TTL_S = 60
__all__ = ["EVENTS_MAXLEN", "BusPublish", "Fence", "Outbox"]

# (stream, model) -> publish through the bus (FastStream) so consumers get the usual envelope.
BusPublish = Callable[[str, BaseModel], Awaitable[Any]]


async def _unfenced() -> None:
    return None


class Outbox:
    """A session's outgoing messages. Events go to the worker's EventSender (sender.py), which keeps
    their order, coalesces streamed text and makes the XADDs; the Outbox only builds them.

    Everything goes out fenced: a worker that lost the session's lease (or was paused past it)
    publishes nothing more for it. Only the announcements made after releasing the lease on
    purpose (the dormant status) pass `fenced=False`."""

    def __init__(self, sender: EventSender, sid: str, bus: BusPublish, fence: Fence = _unfenced) -> None:
        self.client = sender.client
        self.sid = sid
        self.bus = bus
        self.fence = fence
        self.run_id: str | None = None  # stamped on every event while a run is active (`for_run`)
        self.traceparent: str | None = None  # the recorded run span's, likewise (never per-chunk spans)
        self._sender = sender
        self._queue = sender.queue(sid, fence)

    def for_run(self, run_id: str | None, traceparent: str | None = None) -> None:
        """The run the next events belong to (supervisor.py), None between runs."""
        self.run_id, self.traceparent = run_id, traceparent

    async def event(self, type: EventType, data: dict[str, Any] | None = None,
                    also: Also | None = None, *, fenced: bool = True,
                    wait: bool = True) -> str | None:
        """XADD one event and return its stream id; `also` adds commands to the same round trip (a
        non-transactional pipeline). `wait=False`: a progress event, queued (returns None at once)."""
        data = data or {}
        if not wait and also is None and _delta_only(type, data):
            self._sender.enqueue_text(self._queue, data["delta"], self.run_id, self.traceparent)
            return None
        ev = SessionEvent(type=type, session_id=self.sid, data=data, run_id=self.run_id)
        if not wait:
            self._sender.enqueue(self._queue, ev, also, self.traceparent)
            return None
        return await self._sender.send(self._queue, ev, also, fenced=fenced, parent=self.traceparent)

    async def reply(self, request_id: str, status: int, body: dict[str, Any], *, fenced: bool = True) -> None:
        key = keys.reply(self.sid, request_id)
        payload = InboxReply(request_id=request_id, status=status, body=body).model_dump_json()
        if fenced:
            await self.fence()
        pipe = self.client.pipeline(transaction=True)
        pipe.rpush(key, payload)
        pipe.expire(key, REPLY_TTL_S)
        await pipe.execute()

    async def publish(self, stream: str, message: BaseModel) -> None:
        """To a service stream (another owner's input), fenced, while no event of the session is being
        sent (EventSender.exclusive)."""
        await self._sender.exclusive(self._queue, lambda: self.bus(stream, message))


async def tell_wake_failed(outbox: Outbox, exc: Exception) -> None:
    """A wake that could not finish (worker.py `on_wake`) is told to the user as an error event: its
    prompt stays unread in the inbox for the next wake, never silently dropped (docs/architecture.md
    "How a session wakes"). Sent unfenced: the lease is already given back."""
    with contextlib.suppress(Exception):  # Redis down too: the worker's log line is all there is
        await outbox.event("error", {"error": "the session could not be woken; its prompt is kept and retried",
                                     "source": "wake", "kind": type(exc).__name__}, fenced=False)


def _delta_only(type: str, data: dict[str, Any]) -> bool:
    """Streamed text that can be appended to the previous one (not a restart notice, not an image)."""
    return type == "message_update" and len(data) == 1 and isinstance(data.get("delta"), str)
