"""One-time move of the legacy notification keys built from raw ids to the hashed keys
(docs/architecture.md "Limits on hostile input": ids are data, never key names).

Legacy: `gamma:{sid}:notification:{id}` (record, a string) and `gamma:{sid}:notification:{id}:state`
(a hash), so the record of id `Y:state` and the state of id `Y` shared one key. The Redis type tells
them apart: a string is always a record, a hash always a state. Pending sets hold raw ids as members,
not keys, and stay as they are. Records keep their TTL (RENAME). Runs at startup before any intake;
a marker key makes later starts skip the SCAN.
"""

from __future__ import annotations

import redis.asyncio as aioredis
import structlog

from shared.redis import keys
from shared.redis.redis_wire import text

DONE = "gamma:migrations:notification-keys-hashed"
_STATE = ":state"
log = structlog.get_logger()

# KEYS: legacy key, record target, state target (absent when the legacy name has no `:state` suffix).
# Returns 1 moved, 2 dropped (the hashed key exists already, and is newer), 0 left (unexpected type).
_MOVE = """
local kind = redis.call('TYPE', KEYS[1])['ok']
local target
if kind == 'string' then target = KEYS[2]
elseif kind == 'hash' and KEYS[3] then target = KEYS[3]
else return 0 end
if redis.call('EXISTS', target) == 1 then
  redis.call('DEL', KEYS[1])
  return 2
end
redis.call('RENAME', KEYS[1], target)
return 1
"""


async def migrate_legacy_keys(client: aioredis.Redis) -> int:
    if await client.exists(DONE):
        return 0
    move = client.register_script(_MOVE)
    moved = 0
    async for raw in client.scan_iter(match=keys.legacy_notification_pattern(), count=1000):
        key = text(raw)
        sid = keys.inbox_stream_sid(key)
        rest = key[len(keys.legacy_notification_prefix(sid)):]
        targets = [keys.notification(sid, rest)]
        if rest.endswith(_STATE):
            targets.append(keys.notification_state(sid, rest[: -len(_STATE)]))
        result = int(await move(keys=[key, *targets]))
        if result == 1:
            moved += 1
        elif result == 0:
            log.warning("notification_legacy_key_left", key=key)
    await client.set(DONE, "1")
    if moved:
        log.info("notification_keys_migrated", moved=moved)
    return moved
