"""Which side serves a request: the lease holder (live) or the proxy on the session disk (dormant).

Dormant writes hold `gamma:{sid}:dormant-write` (SET NX PX) and check that no lease exists after
taking it: a runtime that takes the lease afterwards waits for the lock to go before it reads the
disk, so the proxy never writes under a live runtime and the runtime never reads a half-done flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import redis.asyncio as aioredis
from fastapi import Depends

from services.proxy.auth import current_user
from services.proxy.deps import Proxy, get_proxy
from services.proxy.edge.errors import ApiError
from services.proxy.rows import SessionState, load_state
from shared.contracts.base import new_id
from shared.history.rewind import finish_pending_on_disk, snapshot_on_disk
from shared.redis import keys
from shared.redis.redis_wire import COMPARE_AND_DELETE
from shared.storage.disk import session_paths
from shared.storage.snapshots import SnapshotLimits
from shared.ui.write_model import Refused

LOCK_PX = 10_000
# Dormant writes after which the disk is snapshotted (docs/architecture.md "Snapshots, rewind and fork").
SNAPSHOT_AFTER = frozenset({"file", "file_delete", "document", "document_delete"})
Mode = Literal["live", "dormant"]
T = TypeVar("T")



class BecameLive(Exception):
    """A lease appeared between the liveness check and the dormant-write lock: forward instead."""


async def owned_session(sid: str, user: str = Depends(current_user), proxy: Proxy = Depends(get_proxy)) -> SessionState:
    """The session, if it exists and belongs to the caller; anyone else gets the same 404, and so does
    everyone for a session being deleted (services/proxy/dormant/erase.py)."""
    state = await owned_or_deleting(sid, user, proxy)
    if state.row.status == "deleting":
        raise ApiError(404, f"session {sid!r} not found")
    return state


async def owned_or_deleting(sid: str, user: str = Depends(current_user),
                            proxy: Proxy = Depends(get_proxy)) -> SessionState:
    """As `owned_session`, a session being deleted included (DELETE resumes its erase)."""
    state = await load_state(proxy.redis, sid) if _plausible(sid) else None
    if state is None or state.row.owner != user:
        raise ApiError(404, f"session {sid!r} not found")
    return state


def _plausible(sid: str) -> bool:
    return 0 < len(sid) <= 64 and all(c.isalnum() or c in "_-" for c in sid) and sid.isascii()


async def write_mode(proxy: Proxy, state: SessionState) -> Mode:
    """live or dormant for a write; a waking session is waited for (bounded), then refused with 409."""
    status = state.status()
    if status == "live":
        return "live"
    if status == "dormant":
        return "dormant"
    sid = state.row.id
    deadline = time.monotonic() + proxy.settings.sessions.reply_timeout_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        current = await load_state(proxy.redis, sid)
        if current is None:
            raise ApiError(404, f"session {sid!r} not found")
        now_status = current.status()
        if now_status == "live":
            return "live"
        if now_status == "dormant":
            return "dormant"
    raise ApiError(409, "the session is waking; retry the write once it is live")


@contextlib.asynccontextmanager
async def dormant_lock(redis: aioredis.Redis, sid: str, wait_s: float = 5.0) -> AsyncIterator[None]:
    """Hold the dormant-write lock while no lease exists; raises BecameLive if a lease exists."""
    token = new_id("dw_")
    lock = keys.dormant_write(sid)
    deadline = time.monotonic() + wait_s
    while not await redis.set(lock, token, nx=True, px=LOCK_PX):
        if time.monotonic() > deadline:
            raise ApiError(409, "another write to this dormant session is in progress; retry")
        await asyncio.sleep(0.05)
    try:
        if await redis.exists(keys.lease(sid)):
            raise BecameLive()
        yield
    finally:
        await redis.eval(COMPARE_AND_DELETE, 1, lock, token)  # type: ignore[misc]


@dataclass(frozen=True)
class Applied(Generic[T]):
    """A write the proxy applied itself (the session is dormant)."""

    value: T


async def apply_if_dormant(proxy: Proxy, state: SessionState, kind: str,
                           apply: Callable[[], Awaitable[T | Refused]]) -> Applied[T] | None:
    """Every write route's first step. Dormant: `apply` runs under the dormant-write lock (a refusal
    becomes its 4xx), and the write is counted. None: the session is live, or a lease appeared before
    the lock was taken; the caller forwards the write to the lease holder."""
    if await write_mode(proxy, state) != "dormant":
        return None
    try:
        async with dormant_lock(proxy.redis, state.row.id):
            if await gone(proxy.redis, state.row.id):  # deleted after the route read the row: write nothing
                raise ApiError(404, f"session {state.row.id!r} not found")
            # A rewind a crash cut short comes first: a write after it must not be undone by its resumption.
            await asyncio.to_thread(finish_pending_on_disk, session_paths(proxy.settings.storage.data_dir, state.row.id),
                                    SnapshotLimits.of(proxy.settings))
            value = await apply()
            if kind in SNAPSHOT_AFTER and not isinstance(value, Refused):
                await asyncio.to_thread(snapshot_on_disk, session_paths(proxy.settings.storage.data_dir, state.row.id),
                                        SnapshotLimits.of(proxy.settings), "upload")
    except BecameLive:
        return None
    if isinstance(value, Refused):
        raise refused(value)
    proxy.metrics.dormant_writes.labels(kind).inc()
    return Applied(value)


async def gone(redis: aioredis.Redis, sid: str) -> bool:
    """The row is gone or being deleted (services/proxy/dormant/erase.py holds this same lock to erase)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hexists(keys.session_row(sid), "owner")
        pipe.hget(keys.session_row(sid), "status")
        owned, status = await pipe.execute()
    return not owned or status in (keys.STATUS_DELETING, keys.STATUS_DELETING.encode())


def refused(r: Refused) -> ApiError:
    return ApiError(r.status, r.message, r.detail)
