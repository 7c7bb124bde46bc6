"""The notification store: Redis only, written only by this service (docs/architecture.md "Ownership").

Per notification, under the session's hash tag (keys are built from a hash of the id, never the raw id:
an id such as `Y:state` must not name another id's keys):
- `keys.notification(sid, id)`: the immutable record (JSON), created with SET NX: the dedupe gate;
- `keys.notification_state(sid, id)`: hash `status` (pending | delivered | consumed), `parts`,
  `deliveries`, `recorded` (count) and `r:{n}` = transcript entry id of each recorded part;
- `keys.notifications_pending(sid)`: sorted set of unconsumed ids scored by arrival, so a wake delivers
  them in the order they came in. An id leaves it only when every part is recorded.

Each multi-key change is one Lua script so a crash never leaves a record without its state.
"""

from __future__ import annotations

from typing import Any, Literal

import redis.asyncio as aioredis
from pydantic import BaseModel

from shared.contracts.base import now_ms
from shared.contracts.streams.inbox import Injection
from shared.contracts.streams.notifications import ExternalNotification
from shared.redis import keys, redis_cluster
from shared.redis.redis_wire import optional_text, text
from shared.streams.inbox import entry_fields, ring_arg, ring_lua

Status = Literal["pending", "delivered", "consumed"]
# After consumption the record stays this long so a late duplicate POST is still recognised.
CONSUMED_TTL_S = 7 * 24 * 3600

# One round trip for an intake: session check, dedupe, pending entry, and, if a lease exists, the
# inbox appends. The lease is read inside the script, after the pending entry exists in effect, so a
# SessionLive that follows a lease taken later always finds it (no notification falls in between).
# KEYS: record, state, pending, session row, lease, inbox. ARGV: record JSON, parts, now, id, the
# inbox's ring channel (shared/streams/inbox.py `ring_arg`), then (type, data) pairs of the inbox entries.
# Returns {created, status}, plus the stored record for a repeat.
_SUBMIT = """
if redis.call('EXISTS', KEYS[4]) == 0 then return {-1, 'unknown'} end
if redis.call('HGET', KEYS[4], 'status') == 'deleting' then return {-1, 'unknown'} end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  return {0, redis.call('HGET', KEYS[2], 'status') or 'pending', redis.call('GET', KEYS[1])}
end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('HSET', KEYS[2], 'status', 'delivered', 'parts', ARGV[2], 'recorded', 0, 'deliveries', 1,
             'delivered_at', ARGV[3])
  for i = 6, #ARGV, 2 do
    redis.call('XADD', KEYS[6], '*', 'type', ARGV[i], 'data', ARGV[i + 1])
  end
  -- RING
  return {1, 'delivered'}
end
redis.call('HSET', KEYS[2], 'status', 'pending', 'parts', ARGV[2], 'recorded', 0, 'deliveries', 0)
return {1, 'pending'}
""".replace("-- RING", ring_lua(5))

_MARK_DELIVERED = """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'pending' or status == 'delivered' then
  redis.call('HSET', KEYS[1], 'status', 'delivered', 'delivered_at', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
  return 1
end
return 0
"""

# Returns the status after recording; idempotent per part (HSETNX), so a redelivered
# InjectionRecorded counts once.
_RECORD_PART = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'unknown' end
if redis.call('HSETNX', KEYS[2], 'r:' .. ARGV[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], 'recorded', 1)
end
local parts = tonumber(redis.call('HGET', KEYS[2], 'parts') or '1')
local recorded = tonumber(redis.call('HGET', KEYS[2], 'recorded') or '0')
if recorded >= parts then
  redis.call('HSET', KEYS[2], 'status', 'consumed', 'consumed_at', ARGV[4])
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[5])
  return 'consumed'
end
return redis.call('HGET', KEYS[2], 'status')
"""


class StoredNotification(BaseModel):
    session_id: str
    notification: ExternalNotification
    received_at: int
    parts: int


class Submitted(BaseModel):
    created: bool
    status: Status
    # For a repeated id: the notification stored first, so the caller can tell a retry from a conflict.
    existing: StoredNotification | None = None



class NotificationStore:
    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client
        self._mark = client.register_script(_MARK_DELIVERED)
        self._record = client.register_script(_RECORD_PART)

    async def submit(
        self, sid: str, notification: ExternalNotification, injections: list[Injection]
    ) -> Submitted | None:
        """Store a new notification and, when the session is live, append its injections to the inbox.

        None for an unknown session. A repeated id changes nothing and returns the stored record.
        """
        record = StoredNotification(session_id=sid, notification=notification, received_at=now_ms(),
                                    parts=len(injections))
        entries: list[str] = []
        for injection in injections:
            fields = entry_fields(injection)  # with the intake request's trace
            entries += [fields["type"], fields["data"]]
        # Acknowledged to the producer (202): on a cluster, on a replica first (redis_cluster.durable).
        names = [keys.notification(sid, notification.id), keys.notification_state(sid, notification.id),
                 keys.notifications_pending(sid), keys.session_row(sid), keys.lease(sid), keys.inbox(sid)]
        result = await redis_cluster.durable(
            self._r, names[0], "EVAL", _SUBMIT, len(names), *names,
            record.model_dump_json(), len(injections), record.received_at, notification.id, ring_arg(self._r, sid),
            *entries,
        )
        created, status = int(result[0]), optional_text(result[1])
        if created < 0:
            return None
        existing = StoredNotification.model_validate_json(result[2]) if len(result) > 2 and result[2] else None
        return Submitted(created=bool(created), status=status, existing=existing)  # type: ignore[arg-type]

    async def status(self, sid: str, nid: str) -> Status | None:
        value = optional_text(await self._r.hget(keys.notification_state(sid, nid), "status"))
        return value if value in ("pending", "delivered", "consumed") else None  # type: ignore[return-value]

    async def state(self, sid: str, nid: str) -> dict[str, str]:
        raw = await self._r.hgetall(keys.notification_state(sid, nid))
        return {optional_text(k) or "": optional_text(v) or "" for k, v in raw.items()}

    async def pending(self, sid: str) -> list[StoredNotification]:
        """Every unconsumed notification of the session (never delivered, or delivered but unrecorded)."""
        members: list[Any] = list(await self._r.zrange(keys.notifications_pending(sid), 0, -1))
        ids = [text(m) for m in members]
        if not ids:
            return []
        raws = await self._r.mget([keys.notification(sid, i) for i in ids])
        return [StoredNotification.model_validate_json(raw) for raw in raws if raw is not None]

    async def load(self, sid: str, nid: str) -> StoredNotification | None:
        raw = await self._r.get(keys.notification(sid, nid))
        return StoredNotification.model_validate_json(raw) if raw is not None else None

    async def mark_delivered(self, sid: str, nid: str) -> bool:
        """Before the inbox append: a fast record can then never be overwritten by 'delivered'."""
        return bool(await self._mark(keys=[keys.notification_state(sid, nid)], args=[now_ms()]))

    async def record_part(self, sid: str, nid: str, part: int, entry_id: str) -> Status | Literal["unknown"]:
        result = await self._record(
            keys=[keys.notification(sid, nid), keys.notification_state(sid, nid), keys.notifications_pending(sid)],
            args=[part, entry_id, nid, now_ms(), CONSUMED_TTL_S],
        )
        return optional_text(result) or "unknown"  # type: ignore[return-value]
