"""Deleting a session (docs/architecture.md "Session lifecycle"): durable, resumable, leaves nothing.

1. `begin`: the id goes into `gamma:sessions:deleting` (the durable intent, due for a resume after
   RESUME_AFTER_MS), the row's status becomes `deleting` (every route answers 404, the runtime takes
   no lease, the notifications intake refuses), and the id leaves the owner's index (the listing and
   the session quota no longer count it).
2. `quiesce`: a live session gets a `Stop{reason: "delete"}` through its inbox, the path POST /suspend
   takes: the runtime aborts the run, releases the lease and does not schedule the dormant sweep.
3. `erase`, under the dormant-write lock (no runtime holds the session) and the digest's session lock
   (no digest write is half done): the session directory is renamed into `$GAMMA_DATA_DIR/.trash/`
   (gone for every reader at once) and removed; every key under the `{sid}` tag (shared/redis/deletion.py)
   and the session's members of the global sorted sets are deleted; the id becomes a tombstone
   (`gamma:sessions:deleted`); the row goes last.
4. The id stays in `gamma:sessions:deleting` for GAMMA_DELETE_FINAL_PASS_S more: a sweep (`resume_due`, every
   GAMMA_DELETE_SWEEP_INTERVAL_S on every proxy, and all of them at a proxy's start) erases once
   more whatever a message already on its way wrote meanwhile, then forgets the id.

Each step is idempotent, so a proxy killed anywhere leaves a state the sweep completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import structlog

from services.proxy.deps import Proxy
from services.proxy.edge.errors import ApiError
from services.proxy.liveness import BecameLive, dormant_lock
from shared.contracts.base import new_id, now_ms
from shared.contracts.streams.inbox import Stop
from shared.redis import keys
from shared.redis.deletion import global_members, session_keys
from shared.redis.redis_wire import text
from shared.storage.disk import session_paths
from shared.storage.walk import remove_tree

log = structlog.get_logger()
RESUME_AFTER_MS = 120_000  # a delete still marked after this lost its proxy: the sweep takes it over
LOCKS = ("dormant-write", "digest-lock")  # the key suffixes held while erasing: released, not deleted
TOMBSTONES_MAX = 1_000_000


async def begin(redis: aioredis.Redis, sid: str, owner: str) -> None:
    await redis.zadd(keys.SESSIONS_DELETING, {sid: now_ms() + RESUME_AFTER_MS}, nx=True)
    # Out of the listing before the row says `deleting`: whoever sees that status (a client, another
    # proxy) never finds the session listed, even when this proxy dies between the two (the intent
    # above resumes the rest).
    await redis.zrem(keys.user_sessions(owner), sid)
    await redis.hset(keys.session_row(sid), mapping={"status": keys.STATUS_DELETING, "updated_at": str(now_ms())})


ERASE_BUDGET_S = 600.0  # one erase's removal of a session directory (resumed by the next erase past it)


async def quiesce(proxy: Proxy, sid: str) -> bool:
    """True once no runtime holds the session (Stop through the inbox, then the lease's expiry)."""
    deadline = time.monotonic() + proxy.settings.sessions.reply_timeout_s + 2 * proxy.settings.runtime.lease_ms / 1000
    while await proxy.redis.exists(keys.lease(sid)):
        if time.monotonic() > deadline:
            return False
        with contextlib.suppress(ApiError):  # 504 (runtime gone: its lease expires) or 409 (moved)
            await proxy.forward(Stop(session_id=sid, reason="delete"))
        await asyncio.sleep(0.05)
    return True


def _remove_disk(data_dir: Path, sid: str) -> None:
    root = session_paths(data_dir, sid).root
    trash = Path(data_dir) / ".trash"
    trash.mkdir(parents=True, exist_ok=True)
    if root.exists():
        root.rename(trash / f"{sid}.{new_id('t_')}")  # gone for every reader at once
    trash_fd = os.open(trash, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for left in trash.glob(f"{sid}.*"):  # this erase's and any an earlier, killed one left
            # Iterative, any depth (a command may have nested the workspace deep): shared/storage/walk.py.
            with contextlib.suppress(OSError):
                remove_tree(trash_fd, left.name, budget_s=ERASE_BUDGET_S)
    finally:
        os.close(trash_fd)


async def erase(proxy: Proxy, sid: str) -> None:
    """Disk, keys, global members, then the tombstone and the row. Raises BecameLive if a lease
    appeared (the caller quiesces again)."""
    redis = proxy.redis
    digest_lock = redis.lock(keys.digest_lock(sid), timeout=30, sleep=0.01, blocking_timeout=30)
    async with dormant_lock(redis, sid, wait_s=15.0):
        if not await digest_lock.acquire():
            raise ApiError(503, "the session's digest is busy; retry the delete")
        try:
            await asyncio.to_thread(_remove_disk, proxy.settings.storage.data_dir, sid)
            held = {keys.session_row(sid), *(f"gamma:{{{sid}}}:{suffix}" for suffix in LOCKS)}
            doomed = [k for k in await session_keys(redis, sid) if k not in held]
            for i in range(0, len(doomed), 500):  # one slot: a multi-key DEL is fine on a cluster
                await redis.delete(*doomed[i : i + 500])
            for zset, members in (await global_members(redis, sid)).items():
                if members:
                    await redis.zrem(zset, *members)
            now = now_ms()
            await redis.zadd(keys.SESSIONS_DELETED, {sid: now})
            await redis.zremrangebyscore(keys.SESSIONS_DELETED, "-inf", now - proxy.settings.sessions.deleted_retention_s * 1000)
            await redis.zremrangebyrank(keys.SESSIONS_DELETED, 0, -TOMBSTONES_MAX - 1)
            await redis.delete(keys.session_row(sid))
        finally:
            with contextlib.suppress(Exception):
                await digest_lock.release()


async def delete_session(proxy: Proxy, sid: str, reschedule: bool = True) -> bool:
    """Quiesce and erase; True once erased, False if the runtime still holds it (the sweep goes on).
    `reschedule`: due again for the final pass."""
    for _ in range(3):
        if not await quiesce(proxy, sid):
            return False
        try:
            await erase(proxy, sid)
        except BecameLive:
            continue
        if reschedule:
            # The final pass: whatever a message already on its way writes meanwhile is erased then.
            final_at = now_ms() + int(proxy.settings.sessions.delete_final_pass_s * 1000)
            await proxy.redis.zadd(keys.SESSIONS_DELETING, {sid: final_at}, xx=True)
        log.info("session_erased", session_id=sid)
        return True
    return False


async def resume_due(proxy: Proxy, everything: bool = False) -> int:
    """Finish deletes a proxy left half done and make each finished one's final pass. `everything`:
    not only the due ones (a proxy's start: whatever a killed proxy left)."""
    due: Any = await proxy.redis.zrangebyscore(keys.SESSIONS_DELETING, "-inf", "+inf" if everything else now_ms(),
                                               start=0, num=100, withscores=True)
    done = 0
    for member, score in due:
        sid = text(member)
        final = await proxy.redis.zscore(keys.SESSIONS_DELETED, sid) is not None  # erased once already
        try:
            erased = await delete_session(proxy, sid, reschedule=not final)
        except Exception:  # noqa: BLE001 - the next pass tries again
            log.exception("session_erase_failed", session_id=sid)
            continue
        if erased and final:
            # Forgotten only at the score it was read with (a delete started again meanwhile stays).
            await proxy.redis.eval(_FORGET_AT, 1, keys.SESSIONS_DELETING, sid, str(int(score)))  # type: ignore[misc]
            done += 1
    return done


_FORGET_AT = """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) <= tonumber(ARGV[2]) then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""


async def sweep_forever(proxy: Proxy) -> None:
    """At the proxy's start everything marked, then what is due, every GAMMA_DELETE_SWEEP_INTERVAL_S."""
    everything = True
    while True:
        try:
            count = await resume_due(proxy, everything=everything)
            everything = False
            if count:
                log.info("deletes_resumed", sessions=count)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - Redis away: the next pass
            log.exception("delete_sweep_failed")
        await asyncio.sleep(proxy.settings.sessions.delete_sweep_interval_s)
