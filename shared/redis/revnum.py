"""Numbering a session's file changes, so the revision a write is answered with is the one the
digest records (docs/integration.md "Forwarded live writes").

The digest owns revisions: a change that names its revision (`to_revision`) gets it when it is above
the ref's current one, else current + 1. Reading the digest's current revision and answering + 1 lags
when writes to one file follow each other faster than the digest takes them in: two writes both read
current 0, both answer 1, and the digest records 1 and 2. So the files' one writer numbers every file
change it makes, the user's and the agent's alike, with one atomic script (live: the lease holder;
dormant: the proxy, under the dormant-write lock, which also publishes the change under it):
one above both the digest's current revision and the last number it handed out for the ref. The
numbers only grow, and each is above the digest's current one when the change reaches it, so the digest
records exactly that number, and a dormant write the digest has not taken in when the session wakes
cannot share a number with the first live one. The dormant sweep removes the key (shared/redis/dormancy.py);
the digest's current revision alone is then the floor again (a write while dormant brings the key back
until the next sweep or its expiry).
"""

from __future__ import annotations

from typing import Any

from shared.redis import keys

NUMBERS_TTL_S = 24 * 3600  # a holder that died without a sweep does not leave the hash forever

# KEYS: the digest's revisions hash, the numbers hash. ARGV: the ref, the TTL (s).
_NEXT = """
local current = 0
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  local ok, state = pcall(cjson.decode, raw)
  if ok and type(state) == 'table' and tonumber(state['current']) then current = tonumber(state['current']) end
end
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') or 0
local n = math.max(current, last) + 1
redis.call('HSET', KEYS[2], ARGV[1], n)
redis.call('EXPIRE', KEYS[2], ARGV[2])
return n
"""


async def next_revision(client: Any, sid: str, ref: str) -> int:
    """The revision of the change the caller is about to publish for `ref` (`to_revision`)."""
    return int(await client.eval(_NEXT, 2, keys.revisions(sid), keys.revision_numbers(sid), ref, NUMBERS_TTL_S))
