"""The session's fence: a field of its row (`keys.FENCE_FIELD`), not a key of its own.

A key costs Redis ~100 B before its value (dict entry, key string, object header, bucket); a dormant
session kept one only for this counter (docs/integration.md "Dormant sessions in Redis": a dormant session costs ≤ 1 KB). The field keeps
the same rules: only the runtime's lease script increments it (HINCRBY), fences only grow.

A row may still come with a legacy `keys.legacy_fence(sid)` key: readers take the larger of
the two (`fence_of`), and the lease script and the dormancy sweep fold the key into the row
(`FOLD_LEGACY`) and delete it, so it goes at the session's next wake or sweep.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from shared.redis import keys
from shared.redis.redis_wire import optional_text

# Lua, prepended to a script: moves a legacy fence key into the row's `field`, keeping the larger value;
# a no-op (one GET) once the key is gone. Both keys carry the same {sid} hash tag.
FOLD_LEGACY = """
local function fold_legacy_fence(legacy_key, row_key, field)
  local legacy = tonumber(redis.call('GET', legacy_key) or '')
  if legacy == nil then return end
  local current = tonumber(redis.call('HGET', row_key, field) or '0') or 0
  if legacy > current then redis.call('HSET', row_key, field, string.format('%d', legacy)) end
  redis.call('DEL', legacy_key)
end
"""

def _int(value: object) -> int:
    raw = optional_text(value) if isinstance(value, (bytes, str)) else None
    return int(raw) if raw is not None and raw.isdigit() else 0


def fence_of(row_field: object, legacy: object) -> int:
    """The fence from the row's field and the legacy key's value (either may be missing: 0)."""
    return max(_int(row_field), _int(legacy))


async def read_fence(client: aioredis.Redis, sid: str) -> int | None:
    """The session's fence, None when it never had one (no lease was ever taken). One round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.hget(keys.session_row(sid), keys.FENCE_FIELD)
    pipe.get(keys.legacy_fence(sid))
    field, legacy = await pipe.execute()
    if field is None and legacy is None:
        return None
    return fence_of(field, legacy)
