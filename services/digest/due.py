"""The digest's timing and locking, apart from what a digest says (builder.py):

- `session_lock`: all of one session's state changes run under a Redis lock, so replicas and the
  due-loop never interleave; its release survives a Redis failover (`release`);
- `DueLoop`: the debounce timer, kept in Redis (`keys.DIGEST_DUE`, score = when due) so a restart or
  another replica picks it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import LockError

from shared.contracts.base import now_ms
from shared.redis import keys
from shared.redis.session_locks import SessionLocks

log = structlog.get_logger()
DUE_BATCH = 50  # due refs flushed per poll

# Remove a due entry only if nobody rescheduled it while we flushed.
_REMOVE_IF_SCORE = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


async def release(lock: Any, retry_for_s: float = 5.0) -> None:
    """Release the session's digest lock, retrying through a Redis failover: a release lost to a dead
    primary left the lock on its promoted replica for its whole 30 s timeout, and every later change of
    the session waited that long (the cluster fault test's stalled `gamma:lifecycle` reader)."""
    deadline = time.monotonic() + retry_for_s
    while True:
        try:
            await lock.release()
            return
        except LockError:
            return  # no longer ours (expired): nothing to release
        except Exception:  # noqa: BLE001 - Redis trouble: try again shortly, then let the timeout do it
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.2)


LOCK_WAIT_S = 60


@contextlib.asynccontextmanager
async def session_lock(client: aioredis.Redis, sid: str, local: SessionLocks | None = None) -> AsyncIterator[None]:
    """`local`: this process's own holders queue on an asyncio lock first, so only one of them at a
    time polls the Redis lock (other replicas still contend there): under load, a session's change,
    flush, record and settle handlers polled it every 5 ms against each other, a round trip each
    (bench/results/stream.md "bench-e2e CPU per operation")."""
    if local is None:
        async with _redis_lock(client, sid, LOCK_WAIT_S):
            yield
        return
    started = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        try:
            async with asyncio.timeout(LOCK_WAIT_S):
                await stack.enter_async_context(local.hold(sid))
        except TimeoutError:
            raise TimeoutError(f"digest lock for {sid} not acquired") from None
        await stack.enter_async_context(_redis_lock(client, sid, LOCK_WAIT_S - (time.monotonic() - started)))
        yield


@contextlib.asynccontextmanager
async def _redis_lock(client: aioredis.Redis, sid: str, wait_s: float) -> AsyncIterator[None]:
    lock = client.lock(keys.digest_lock(sid), timeout=30, sleep=0.005, blocking_timeout=max(wait_s, 0.1))
    if not await lock.acquire():
        raise TimeoutError(f"digest lock for {sid} not acquired")
    try:
        yield
    finally:
        await release(lock)


class DueLoop:
    """Flushes each (session, ref) whose debounce window ended; `flush` sends or writes the manifest."""

    def __init__(self, client: aioredis.Redis, flush: Callable[[str, str], Awaitable[None]],
                 poll_s: float = 0.025) -> None:
        self._r = client
        self._flush = flush
        self._poll_s = poll_s
        self._remove_if_score = client.register_script(_REMOVE_IF_SCORE)

    async def run(self) -> None:
        while True:
            try:
                await self.flush_due()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the loop alive; the entry stays due
                log.error("digest_due_failed", error=str(exc))
                await asyncio.sleep(1.0)
            await asyncio.sleep(self._poll_s)

    async def flush_due(self) -> None:
        items: list[Any] = await self._r.zrangebyscore(keys.DIGEST_DUE, "-inf", now_ms(), start=0, num=DUE_BATCH,
                                                       withscores=True)
        by_session: dict[str, list[tuple[Any, Any, str]]] = {}
        for member, score in items:
            sid, ref = json.loads(member)
            by_session.setdefault(sid, []).append((member, score, ref))

        async def flush_session(sid: str, due: list[tuple[Any, Any, str]]) -> None:
            for member, score, ref in due:
                await self._flush(sid, ref)
                await self._remove_if_score(keys=[keys.DIGEST_DUE], args=[member, int(score)])

        # Sessions side by side (each takes its own lock): one after the other, a batch of 50 under
        # load held the last session's digest for the sum of the others' flushes.
        results = await asyncio.gather(*(flush_session(sid, due) for sid, due in by_session.items()),
                                       return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise failed[0]  # the loop logs it; the failed entries stay due
