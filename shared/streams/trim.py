"""Trim a stream to what all its consumer groups have acknowledged (docs/architecture.md "Limits on hostile input": streams grew forever).

`XTRIM <stream> MINID <floor>` removes the entries with ids below `floor`, where `floor` is, over all
the stream's groups, the lowest of
- the oldest entry still pending in the group (read but not acked: a claimer may retry it), and
- the entry after the group's last-delivered id (what it has not read yet).
So nothing any group has still to read or retry is dropped. The floor only moves forward while we
compute it (groups read on, acks shrink the pending lists, new entries get higher ids), so reading
the groups and trimming need not be one atomic step; the script makes it one round trip anyway.

A stream is trimmed only when every group expected on it exists (`EXPECTED_GROUPS`, from
shared/redis/topology.py): a service that
has not started yet creates its group at id 0 and must still find the entries published before.
No group at all (a session inbox before its first wake) means no trimming.

Not trimmed here: `gamma:{sid}:events` keeps its MAXLEN cap (services/runtime/live/events.py): it has no consumer
groups, SSE clients replay from it by `Last-Event-ID`, so "acknowledged" does not exist there and the
cap is the replay window. `gamma:deadletter` is kept for people to read (bounded by its producers' rate).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from shared.redis import topology

log = structlog.get_logger()

# The consumer groups of each service stream. A group missing from a stream blocks its trimming
# until the group's service has created it.
EXPECTED_GROUPS: Mapping[str, frozenset[str]] = topology.groups_by_stream()

# KEYS[1] the stream; ARGV the expected group names. Returns the number of entries removed, or -1
# when the stream is not trimmed (no such stream, no group, an expected group missing).
_TRIM = """
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok or #groups == 0 then return -1 end
local function parse(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function less(ams, aseq, bms, bseq)
  return ams < bms or (ams == bms and aseq < bseq)
end
local seen = {}
local fms, fseq = nil, nil
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  seen[info['name']] = true
  local ms, seq
  if tonumber(info['pending']) > 0 then
    local summary = redis.call('XPENDING', KEYS[1], info['name'])
    ms, seq = parse(summary[2])
  else
    ms, seq = parse(info['last-delivered-id'])
    seq = seq + 1
  end
  if fms == nil or less(ms, seq, fms, fseq) then fms, fseq = ms, seq end
end
for _, name in ipairs(ARGV) do
  if not seen[name] then return -1 end
end
return redis.call('XTRIM', KEYS[1], 'MINID', string.format('%d-%d', fms, fseq))
"""


async def trim_acked(client: aioredis.Redis, stream: str, expected: Iterable[str] | None = None) -> int:
    """Remove the entries every group of `stream` has acknowledged; the count removed (-1: not trimmed)."""
    names = sorted(EXPECTED_GROUPS.get(stream, frozenset()) if expected is None else expected)
    return int(await client.eval(_TRIM, 1, stream, *names))  # type: ignore[misc]


async def trim_all(client: aioredis.Redis, streams: Iterable[str]) -> dict[str, int]:
    """`trim_acked` for several streams in one pipelined round trip."""
    order = sorted(set(streams))
    if not order:
        return {}
    pipe = client.pipeline(transaction=False)
    for stream in order:
        pipe.eval(_TRIM, 1, stream, *sorted(EXPECTED_GROUPS.get(stream, frozenset())))
    replies = await pipe.execute(raise_on_error=False)
    out: dict[str, int] = {}
    for stream, reply in zip(order, replies, strict=True):
        if isinstance(reply, Exception):
            log.warning("stream_trim_failed", stream=stream, error=str(reply)[:300])
            continue
        out[stream] = int(reply)
    return out


async def trim_loop(client: aioredis.Redis, streams: Callable[[], Iterable[str]], interval_s: float) -> None:
    """Every `interval_s`: trim the streams `streams()` names (a service's own groups' streams)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            removed = await trim_all(client, streams())
        except (RedisError, OSError) as exc:  # Redis away: /readyz says so; try again next round
            log.warning("stream_trim_skipped", error=str(exc)[:300])
            continue
        if any(n > 0 for n in removed.values()):
            log.debug("streams_trimmed", removed={s: n for s, n in removed.items() if n > 0})
