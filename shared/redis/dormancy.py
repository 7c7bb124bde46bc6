"""A dormant session costs Redis (almost) nothing (docs/integration.md "Dormant sessions in Redis"): its streams go after a retention window.

When the runtime closes a session it schedules it in `keys.DORMANT_DUE` for GAMMA_DORMANT_RETENTION_S
(the window in which an SSE client may still resume from the events stream). Every runtime worker
sweeps what is due: one script per session, atomic with the lease check, so a session woken in the
meantime is left alone, and a wake that comes after finds nothing it needs gone:
- the events stream is deleted (the runtime's first XADD after a wake recreates it); the id of its
  last entry goes to the session row (`keys.EVENTS_SWEPT_FIELD`) so the SSE route can tell a client
  whose Last-Event-ID is older to reload from GET /transcript (a `reset` event);
- the inbox is deleted with its consumer group unless an entry that only the inbox holds is unread or
  pending (the runtime trimmed the acknowledged entries at close): a prompt that arrived since keeps
  it, and the next wake reads it (the group is created at id 0 on demand, shared/bus.ensure_group).
  The digest's artifact updates and the notifications' injections do not keep it: their owners keep
  them until recorded (the digest's revisions, the pending notification) and deliver them again at
  the next `SessionLive`; an idle runtime that held them for the next user turn (unacked) when it
  closed would otherwise pin the inbox of every session whose last event was a write or a
  notification until a wake that may never come (found in a one-off 20-minute soak, bench/soak.py);
- leftovers of a holder that died (`running`, the digest's `digest-live`) are deleted, and the live
  writes' revision numbers (shared/redis/revnum.py: the digest's current revisions are the floor again);
- what remains is made compact (every key costs ~100 B of overhead before its value): the model usage
  totals move from their own hash into one row field (`keys.USAGE_FIELD`, added to what an earlier
  sweep left there; `read_usage` sums both), the row's wake bookkeeping (`wake_id`, `waking_since`,
  `wake_fence`), which only matters during a wake, goes once the wake window has passed, with the
  fields at the row's defaults (`status` dormant, `variant` base) and the `id` its key repeats, and a
  fence key left from before the fence became a row field is folded into the row (shared/redis/fence.py);
- the digest's revision states (`RefState` JSON) lose their top-level fields at their defaults (null,
  false, empty), which parse back to the same state: a settled ref then fits in 64 bytes;
- the row and the digest's revisions hash are rewritten as listpacks when a value that was once over
  64 bytes (hash-max-listpack-value) made Redis convert them to a hashtable (~2.5x the memory), which
  it never converts back by itself, and every value now fits.
Kept: the row (with the fence: fences only grow, across wakes), the user's index, the digest's revisions
(what the agent saw, for the dormant-write manifest), notifications still pending.
The full table is in docs/integration.md ("Redis keys of a dormant session").
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel

from shared.contracts.base import now_ms
from shared.redis import keys
from shared.redis.fence import FOLD_LEGACY

log = structlog.get_logger()

# KEYS: lease, events, inbox, row, running, digest-live, model-usage, revisions, legacy fence, revnum. ARGV: the
# inbox group, the events-swept field, the usage field, now (ms), the wake window (ms), the fence field,
# then the usage counter names.
# Returns -1 when the session is live (nothing done), else 1 when the inbox was kept (entries wait), 0.
_SWEEP = FOLD_LEGACY + """
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local function compact(key)
  if redis.call('OBJECT', 'ENCODING', key) ~= 'hashtable' then return end
  local all = redis.call('HGETALL', key)
  if #all > 256 then return end
  for i = 1, #all do if #all[i] > 64 then return end end
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(all))
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  local usage = redis.call('HGETALL', KEYS[7])
  if #usage > 0 then
    local add = {}
    for i = 1, #usage, 2 do add[usage[i]] = tonumber(usage[i + 1]) end
    local old = {}
    for n in string.gmatch(redis.call('HGET', KEYS[4], ARGV[3]) or '', '[^,]+') do old[#old + 1] = tonumber(n) end
    local packed = {}
    for i = 7, #ARGV do packed[#packed + 1] = string.format('%d', (old[i - 6] or 0) + (add[ARGV[i]] or 0)) end
    redis.call('HSET', KEYS[4], ARGV[3], table.concat(packed, ','))
    redis.call('DEL', KEYS[7])
  end
  local since = tonumber(redis.call('HGET', KEYS[4], 'waking_since') or '0')
  local status = redis.call('HGET', KEYS[4], 'status')
  if status ~= 'deleting' and (status ~= 'waking' or since + tonumber(ARGV[5]) < tonumber(ARGV[4])) then
    -- Fields at the row's defaults (services/proxy/rows.py SessionRow: status dormant, variant base).
    redis.call('HDEL', KEYS[4], 'wake_id', 'waking_since', 'wake_fence', 'status')
  end
  if redis.call('HGET', KEYS[4], 'variant') == 'base' then redis.call('HDEL', KEYS[4], 'variant') end
  -- The id is the one in the key (SessionRow.from_hash); ~20 B fewer keep the listpack a size class down.
  if redis.call('HEXISTS', KEYS[4], 'owner') == 1 then redis.call('HDEL', KEYS[4], 'id') end
  fold_legacy_fence(KEYS[9], KEYS[4], ARGV[6])
end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #last > 0 and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[4], ARGV[2], last[1][1])
end
local defaults = {seen = true, seen_known = true, deleted = true, notes = true, carry = true, sent = true,
                  pending_since = true}
local function is_default(v)
  return v == cjson.null or v == false or (type(v) == 'table' and next(v) == nil)
end
local states = redis.call('HGETALL', KEYS[8])
for i = 2, #states, 2 do
  local ok, state = pcall(cjson.decode, states[i])
  if ok and type(state) == 'table' and state['current'] ~= nil then
    local dropped = false
    for name, _ in pairs(defaults) do
      if state[name] ~= nil and is_default(state[name]) then state[name] = nil; dropped = true end
    end
    -- A settled ref (no notes, carry or sent left) has released its numbered changes (services/digest/
    -- in_flight.py): its max_seq, a global counter's value, is only needed again at its next change.
    if state['max_seq'] ~= nil and state['notes'] == nil and state['carry'] == nil and state['sent'] == nil then
      state['max_seq'] = nil; dropped = true
    end
    if dropped then redis.call('HSET', KEYS[8], states[i - 1], cjson.encode(state)) end
  end
end
compact(KEYS[4])
compact(KEYS[8])
redis.call('DEL', KEYS[2], KEYS[5], KEYS[6], KEYS[10])
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
-- Entries whose owner delivers them again at the next SessionLive until they are recorded: the
-- digest's artifact updates (its revision state) and the notifications' parts (their pending record).
local redelivered_sources = {artifact = true, notification = true}
local function redelivered(fields)
  local f = {}
  for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
  if f['type'] ~= 'injection' or f['data'] == nil then return false end
  local ok, body = pcall(cjson.decode, f['data'])
  return ok and type(body) == 'table' and redelivered_sources[body['source']] == true
end
local LIMIT = 64
-- Whether an entry only the inbox holds waits there (unread, or read and not acked): a prompt, a UI
-- update... keeps the inbox for the next wake; the redelivered ones do not.
local function waiting()
  local start = '-'
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[3])
  if ok then
    for _, g in ipairs(groups) do
      local info = {}
      for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
      if info['name'] == ARGV[1] then
        local pending = redis.call('XPENDING', KEYS[3], ARGV[1], '-', '+', LIMIT + 1)
        if #pending > LIMIT then return true end
        for _, p in ipairs(pending) do
          local entry = redis.call('XRANGE', KEYS[3], p[1], p[1])
          if #entry > 0 and not redelivered(entry[1][2]) then return true end
        end
        start = '(' .. info['last-delivered-id']
      end
    end
  end
  local unread = redis.call('XRANGE', KEYS[3], start, '+', 'COUNT', LIMIT + 1)
  if #unread > LIMIT then return true end
  for _, entry in ipairs(unread) do
    if not redelivered(entry[2]) then return true end
  end
  return false
end
if waiting() then return 1 end
redis.call('DEL', KEYS[3])
return 0
"""

# Remove a due entry only if it still has the score we swept it at (a session woken and put to
# sleep again meanwhile was rescheduled and must stay).
_UNSCHEDULE = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""


class SweepResult(BaseModel):
    swept: int = 0  # sessions whose streams were dropped
    inbox_kept: int = 0  # of those, inboxes kept because entries wait for the next wake
    live: int = 0  # due sessions found live again (left alone)


# The usage counters, in the order the row's packed field keeps them (the runtime's HINCRBY names).
USAGE_COUNTERS = ("requests", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")
# Past this a `waking` row whose runtime never took the lease reads as dormant (services/proxy/rows.py).
WAKE_WINDOW_MS = 60_000


def session_keys(sid: str) -> list[str]:
    return [keys.lease(sid), keys.events(sid), keys.inbox(sid), keys.session_row(sid), keys.running(sid),
            keys.digest_live(sid), keys.model_usage(sid), keys.revisions(sid), keys.legacy_fence(sid),
            keys.revision_numbers(sid)]


def sweep_args(now: int) -> list[str | int]:
    return [keys.RUNTIME_GROUP, keys.EVENTS_SWEPT_FIELD, keys.USAGE_FIELD, now, WAKE_WINDOW_MS, keys.FENCE_FIELD,
            *USAGE_COUNTERS]


async def read_usage(client: aioredis.Redis, sid: str) -> dict[str, int]:
    """The session's model usage totals: the live hash plus what sweeps folded into the row, read in
    one MULTI (a sweep between two reads would count a total twice or not at all)."""
    pipe = client.pipeline(transaction=True)
    pipe.hgetall(keys.model_usage(sid))
    pipe.hget(keys.session_row(sid), keys.USAGE_FIELD)
    live, packed = await pipe.execute()
    totals = {k.decode() if isinstance(k, bytes) else str(k): int(v) for k, v in live.items()}
    folded = (packed.decode() if isinstance(packed, bytes) else packed or "").split(",")
    for name, value in zip(USAGE_COUNTERS, folded, strict=False):
        if value.strip().lstrip("-").isdigit():
            totals[name] = totals.get(name, 0) + int(value)
    return totals


async def schedule(client: aioredis.Redis, sid: str, retention_s: float, now: int | None = None) -> None:
    """Called by the runtime once the session is dormant (its lease released)."""
    due = (now_ms() if now is None else now) + int(retention_s * 1000)
    await client.zadd(keys.DORMANT_DUE, {sid: due})


async def sweep_session(client: aioredis.Redis, sid: str) -> int:
    """The sweep of one session regardless of its due time (-1 live, 1 inbox kept, 0)."""
    names = session_keys(sid)
    return int(await client.eval(_SWEEP, len(names), *names, *sweep_args(now_ms())))  # type: ignore[misc]


async def sweep_due(client: aioredis.Redis, now: int | None = None, limit: int = 200) -> SweepResult:
    """Sweep up to `limit` sessions whose retention ended. Several workers may run it at once: the
    script is idempotent, and a due entry is removed only at the score it was read with."""
    due: Any = await client.zrangebyscore(
        keys.DORMANT_DUE, "-inf", now_ms() if now is None else now, start=0, num=limit, withscores=True)
    result = SweepResult()
    if not due:
        return result
    sids = [m.decode() if isinstance(m, bytes) else m for m, _ in due]
    pipe = client.pipeline(transaction=False)
    args = sweep_args(now_ms())  # the real clock: `now` may be moved ahead only to pick what is due
    for sid in sids:
        names = session_keys(sid)
        pipe.eval(_SWEEP, len(names), *names, *args)
    replies = await pipe.execute(raise_on_error=False)
    pipe = client.pipeline(transaction=False)
    for sid, (_, score), reply in zip(sids, due, replies, strict=True):
        if isinstance(reply, Exception):
            log.warning("dormant_sweep_failed", session_id=sid, error=str(reply)[:300])
            continue  # stays due: the next pass tries again
        code = int(reply)
        result.live += code == -1
        result.swept += code >= 0
        result.inbox_kept += code == 1
        pipe.eval(_UNSCHEDULE, 1, keys.DORMANT_DUE, sid, _score_text(score))
    await pipe.execute(raise_on_error=False)
    return result


def _score_text(score: float) -> str:
    """ZSCORE's reply for an integral ms score (what `schedule` stores)."""
    return str(int(score)) if float(score).is_integer() else repr(score)
