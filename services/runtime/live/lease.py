"""The session lease: `gamma:{sid}:lease` = "{worker_id}:{fence}", SET NX PX, renewed; fence = HINCRBY of
the session row's `fence` field (shared/redis/fence.py).

`check()` runs before every disk write: a holder whose lease was taken (expired and re-acquired by
another worker) raises LeaseLost and stops touching the session.

Fencing by local time: a lease set with PX at time t0 (taken before the request was sent) cannot
expire, so cannot be taken by another worker, before t0 + ttl. The holder keeps that bound, less a
margin for clock-rate drift, as `valid_until` (monotonic clock, which keeps running while the
process is paused). Inside it, `check()` needs no round trip; when it nears its end (the worker's
housekeeping renews every third of the lease, so only when that fell behind), it renews first. The
passes start a third of the lease apart, not a third after the last one ended: under load a pass takes
a while, and adding it let every renewal drift into `check()`'s own, one EVAL per event and write
(bench/README.md "bench-e2e"). A worker
paused by SIGSTOP (or a stalled VM) past its lease therefore finds, once resumed, that its bound has
passed and that the renewal fails: it writes nothing, even if it had passed a check just before the
pause, because `check()` is the last step before each write and there is no await in between.
This trusts Redis to keep an acknowledged SET: run it with AOF `appendfsync always` (compose, the
dev overlay and the fault suite do) or a replica the client waits for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

import redis.asyncio as aioredis
import structlog

from shared.redis import keys, redis_cluster
from shared.redis.fence import FOLD_LEGACY
from shared.redis.redis_wire import COMPARE_AND_DELETE, COMPARE_AND_RENEW, text

T = TypeVar("T")

# Take the lease (fence = HINCRBY of the row's fence field, shared/redis/fence.py) and, in the same round trip,
# read what the wake needs next: whether the proxy holds the dormant-write lock, and the session row.
# KEYS: lease, legacy fence, dormant-write, row (one {sid} slot). ARGV: holder, ttl, the fence field, the
# row status of a session being deleted (no lease for it: -1).
_ACQUIRE = FOLD_LEGACY + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, 0, {}} end
if redis.call('HGET', KEYS[4], 'status') == ARGV[4] then return {-1, 0, {}} end
fold_legacy_fence(KEYS[2], KEYS[4], ARGV[3])
local fence = redis.call('HINCRBY', KEYS[4], ARGV[3], 1)
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return {fence, redis.call('EXISTS', KEYS[3]), redis.call('HGETALL', KEYS[4])}
"""


# Fences only grow: raise the row's fence field ARGV[1] to at least ARGV[2] (the disk saw a fence Redis
# no longer knows). KEYS: the row.
_RAISE_FENCE = """
if tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
"""


class LeaseLost(RuntimeError):
    pass


def safety_margin_s(ttl_ms: int) -> float:
    """How long before the lease's own expiry the holder stops trusting it: a fifth of the lease, at
    most one second (Redis and this process measure the TTL with different clocks)."""
    return min(ttl_ms / 5, 1000) / 1000


class Lease:
    def __init__(self, client: aioredis.Redis, sid: str, worker_id: str, fence: int, ttl_ms: int) -> None:
        self.client = client
        self.sid = sid
        self.worker_id = worker_id
        self.fence = fence
        self.ttl_ms = ttl_ms
        self.value = f"{worker_id}:{fence}"
        self.lost = False
        self.released = False  # by its holder (release), not lost to another worker
        self.valid_until = 0.0  # monotonic; see the module docstring

    def extend(self, sent_at: float) -> None:
        """A SET PX or PEXPIRE sent at `sent_at` (monotonic) succeeded."""
        self.valid_until = max(self.valid_until, sent_at + self.ttl_ms / 1000 - safety_margin_s(self.ttl_ms))

    def valid_now(self) -> bool:
        return not self.lost and time.monotonic() < self.valid_until

    def held_now(self) -> None:
        """Synchronous: raise unless the lease is ours for certain at this instant."""
        if self.lost:
            raise LeaseLost(self.sid)
        if time.monotonic() >= self.valid_until:
            raise LeaseLost(self.sid)

    @classmethod
    async def acquire(cls, client: aioredis.Redis, sid: str, worker_id: str, ttl_ms: int) -> Lease | None:
        """None when another worker holds the session. One round trip: check, fence, set."""
        lease, _, _ = await cls.acquire_for_wake(client, sid, worker_id, ttl_ms)
        return lease

    @classmethod
    async def acquire_for_wake(
        cls, client: aioredis.Redis, sid: str, worker_id: str, ttl_ms: int
    ) -> tuple[Lease | None, bool, dict[str, str]]:
        """(lease or None, dormant-write lock held, session row), in one round trip."""
        sent_at = time.monotonic()
        # On a cluster the lease is on a replica before the worker acts on it (shared/redis/redis_cluster.py
        # `durable`): a failover never hands out the same fence twice.
        fence, locked, flat = await redis_cluster.durable(
            client, keys.lease(sid), "EVAL", _ACQUIRE, 4, keys.lease(sid), keys.legacy_fence(sid), keys.dormant_write(sid),
            keys.session_row(sid), worker_id, str(ttl_ms), keys.FENCE_FIELD, keys.STATUS_DELETING)
        if int(fence) <= 0:
            return None, False, {}
        row = {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}
        lease = cls(client, sid, worker_id, int(fence), ttl_ms)
        lease.extend(sent_at)
        return lease, bool(locked), row

    async def check(self) -> None:
        """Return only if the lease is certainly ours now; the caller writes right after, with no
        await in between. No round trip while inside the local bound."""
        if self.lost:
            raise LeaseLost(self.sid)
        # Renewed here only when the housekeeping (every third of the lease) fell behind.
        if time.monotonic() >= self.valid_until - self.ttl_ms / 2000 and not await self.renew():
            raise LeaseLost(self.sid)
        self.held_now()  # the renewal's round trip may itself have been paused past the lease

    async def renew(self) -> bool:
        if self.lost:
            return False
        sent_at = time.monotonic()
        ok = await self.client.eval(COMPARE_AND_RENEW, 1, keys.lease(self.sid), self.value, str(self.ttl_ms))  # type: ignore[misc]
        if not ok:
            self.lost = True
        else:
            self.extend(sent_at)
        return bool(ok)

    async def release(self) -> None:
        self.released = True  # first: a renew_all in flight then takes the session's live score back
        await self.client.eval(COMPARE_AND_DELETE, 1, keys.lease(self.sid), self.value)  # type: ignore[misc]
        self.lost = True


async def renewing(lease: Lease, work: Awaitable[T]) -> T:
    """`work` (a wake's read in the I/O pool) while the lease is renewed every third of its TTL: a wake
    of a long history never outlives its lease (docs/architecture.md "How a session wakes"); the
    housekeeping renews only live sessions. LeaseLost when a renewal fails (another holder took it)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=lease.ttl_ms / 3000)
            if done:
                return task.result()
            if not await lease.renew():
                raise LeaseLost(lease.sid)
    finally:
        if not task.done():
            task.cancel()


async def renew_all(client: aioredis.Redis, leases: list[Lease], running: list[str], live_key: str,
                    now_ms: int) -> list[bool]:
    """Renew every lease of a worker in one round trip (a busy event loop makes each await slow, so
    sequential renewals of many sessions could outlast the lease). Also refreshes the `running` keys
    of active runs and the worker's live-session scores. Returns, per lease, whether it is still ours."""
    pipe = client.pipeline(transaction=False)
    sent_at = time.monotonic()
    for lease in leases:
        pipe.eval(COMPARE_AND_RENEW, 1, keys.lease(lease.sid), lease.value, str(lease.ttl_ms))
    for sid in running:
        # Only an existing key: a run that ended while this pipeline was in flight has deleted its key; never recreate it
        # (clients would see `running` for a whole lease after the run).
        # PEXPIRE keeps the value: the active run's id, which the proxy checks `expected_run_id` against.
        pipe.pexpire(keys.running(sid), leases[0].ttl_ms if leases else 10_000)
    scores = {lease.sid: now_ms for lease in leases if not lease.released}
    if scores:
        pipe.zadd(live_key, scores)
    results = await pipe.execute()
    out = []
    for lease, ok in zip(leases, results[: len(leases)], strict=True):
        if not ok:
            lease.lost = True
        elif not lease.lost:
            lease.extend(sent_at)
        out.append(bool(ok) and not lease.lost)
    # A session closed while this pipeline was in flight (its lease released, its live score removed)
    # got its score back from the ZADD above: left there, the orphan scan would take the dormant session
    # for one whose worker died and wake it again. The live key is in another slot than the leases, so
    # no script can do both atomically: remove it again once the release is known.
    if late := [sid for sid in scores if any(lease.released and lease.sid == sid for lease in leases)]:
        await client.zrem(live_key, *late)
    return out


async def raise_fence(client: aioredis.Redis, sid: str, at_least: int) -> None:
    await client.eval(_RAISE_FENCE, 1, keys.session_row(sid), keys.FENCE_FIELD, str(at_least))  # type: ignore[misc]


async def wait_no_dormant_write(client: aioredis.Redis, sid: str, timeout_s: float = 15.0) -> dict[str, str]:
    """The proxy writes dormant state under `dormant-write`; read the disk only after it is gone.
    Returns the session row, read in the same round trip as the last lock check."""
    deadline = time.monotonic() + timeout_s
    while True:
        pipe = client.pipeline(transaction=False)
        pipe.exists(keys.dormant_write(sid))
        pipe.hgetall(keys.session_row(sid))
        locked, row = await pipe.execute()
        if not locked or time.monotonic() > deadline:
            # (a holder that died cannot block us past the lock's own PX of 10 s)
            return {text(k): text(v) for k, v in row.items()}
        await asyncio.sleep(0.05)



# A wake for a session erased after the wake was sent: the lease script made a row holding only its
# fence; drop both (KEYS: lease, row; ARGV: the lease's value).
_FORGET = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('HEXISTS', KEYS[2], 'owner') == 0 then redis.call('DEL', KEYS[2]) end
return 1
"""


async def forget_deleted(client: aioredis.Redis, lease: Lease) -> None:
    """Leave no key behind for a deleted session (shared/redis/deletion.py)."""
    structlog.get_logger().info("wake_ignored_session_deleted", session_id=lease.sid)
    lease.released = True
    await client.eval(_FORGET, 2, keys.lease(lease.sid), keys.session_row(lease.sid), lease.value)  # type: ignore[misc]
