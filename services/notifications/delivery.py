"""Notification delivery: intake (HTTP and stream), live delivery, wake delivery, consumption.

The contract (docs/integration.md "Injections", "Wake"): store first; live -> convert and append to
the inbox; dormant or waking -> keep pending and never start a runtime (unless the urgency policy says
so); on `SessionLive` deliver everything unconsumed, then a `Barrier`; consumed only when the runtime
records every part (`InjectionRecorded`). Redelivery is safe: the runtime records a `source_id` once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
import structlog
from prometheus_client import CollectorRegistry, Counter

from services.notifications.convert import SOURCE, parse_source_id, to_injections
from services.notifications.policy import UrgencyPolicy, never_wake
from services.notifications.settle import wait_for_group
from services.notifications.store import NotificationStore, StoredNotification
from shared.contracts.streams.inbox import Barrier
from shared.contracts.streams.lifecycle import SessionLive
from shared.contracts.streams.notifications import (
    ExternalNotification,
    NotificationAccepted,
    NotificationSubmit,
)
from shared.contracts.streams.recorded import InjectionRecorded
from shared.redis import keys
from shared.redis.deletion import is_deleted
from shared.streams.inbox import append

log = structlog.get_logger()
WakeSender = Callable[[str, ExternalNotification], Awaitable[None]]


class UnknownSession(LookupError):
    """No such session; `deleted`: there was one, deleted (answered 410)."""

    def __init__(self, sid: str, deleted: bool = False) -> None:
        super().__init__(sid)
        self.deleted = deleted


class NotificationConflict(ValueError):
    """A repeated id whose notification differs from the one stored under it: the second is refused,
    not dropped as a duplicate, so the producer learns it reused an id."""

    def __init__(self, notification_id: str) -> None:
        super().__init__(f"notification id {notification_id!r} was already used for a different notification")
        self.notification_id = notification_id


class Metrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        reg = registry or CollectorRegistry()
        self.received = Counter("gamma_notifications_received_total", "Notifications accepted", ["type"], registry=reg)
        self.duplicates = Counter("gamma_notifications_duplicate_total", "Repeated notification ids", registry=reg)
        self.conflicts = Counter("gamma_notifications_conflict_total",
                                 "Repeated notification ids with a different notification (refused)", registry=reg)
        self.delivered = Counter("gamma_notifications_delivered_total", "Injections appended to inboxes",
                                 registry=reg)
        self.consumed = Counter("gamma_notifications_consumed_total", "Notifications recorded in full",
                                registry=reg)


class Delivery:
    def __init__(
        self,
        client: aioredis.Redis,
        *,
        metrics: Metrics | None = None,
        urgency: UrgencyPolicy = never_wake,
        send_wake: WakeSender | None = None,
        settle_timeout_s: float = 2.0,
    ) -> None:
        self._r = client
        self.store = NotificationStore(client)
        self._metrics = metrics or Metrics(None)
        self._urgency = urgency
        self._send_wake = send_wake
        self._settle_timeout_s = settle_timeout_s

    async def submit(self, body: NotificationSubmit) -> NotificationAccepted:
        sid, n = body.session_id, body.notification
        parts = to_injections(sid, n)
        result = await self.store.submit(sid, n, parts)
        if result is None:
            raise UnknownSession(sid, deleted=await is_deleted(self._r, sid))
        created, status = result.created, result.status
        if not created:
            if result.existing is not None and result.existing.notification != n:
                self._metrics.conflicts.inc()
                raise NotificationConflict(n.id)
            self._metrics.duplicates.inc()
            return NotificationAccepted(id=n.id, session_id=sid, duplicate=True, status=status)
        self._metrics.received.labels(n.type).inc()
        if status == "delivered":
            self._metrics.delivered.inc(len(parts))
        elif self._send_wake is not None and self._urgency(n):
            await self._send_wake(sid, n)
        return NotificationAccepted(id=n.id, session_id=sid, duplicate=False, status=status)

    async def _deliver(self, sid: str, n: ExternalNotification) -> int:
        if not await self.store.mark_delivered(sid, n.id):
            return 0  # consumed meanwhile
        count = 0
        for injection in to_injections(sid, n):
            await append(self._r, injection)
            count += 1
        self._metrics.delivered.inc(count)
        return count

    async def on_live(self, event: SessionLive) -> None:
        sid = event.session_id
        pending: list[StoredNotification] = await self.store.pending(sid)
        for record in pending:
            await self._deliver(sid, record.notification)
        # Wait only for a digest that is running (its heartbeat key): with the digest down, wakes are
        # handled one after another here and each would otherwise pay the whole timeout.
        settled = False
        if await self._r.exists(keys.health("digest")):
            settled = await wait_for_group(self._r, [keys.LIFECYCLE, keys.ARTIFACT_CHANGES],
                                           timeout_s=self._settle_timeout_s, session=sid)
        await append(self._r, Barrier(session_id=sid, wake_id=event.wake_id))
        log.info("wake_delivered", session_id=sid, wake_id=event.wake_id, notifications=len(pending),
                 digest_settled=settled)

    async def on_recorded(self, event: InjectionRecorded) -> None:
        if event.source != SOURCE:
            return
        try:
            nid, part = parse_source_id(event.source_id)
        except ValueError:
            log.warning("recorded_bad_source_id", session_id=event.session_id, source_id=event.source_id)
            return
        status = await self.store.record_part(event.session_id, nid, part, event.entry_id)
        if status == "consumed":
            self._metrics.consumed.inc()
        elif status == "unknown":
            log.warning("recorded_unknown_notification", session_id=event.session_id, source_id=event.source_id)
