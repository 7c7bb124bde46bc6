"""The session lease: `gamma:{sid}:lease` = "{worker_id}:{fence}", SET NX PX, renewed; fence = INCR.

`check()` runs before every disk write: a holder whose lease was taken (expired and re-acquired by
another worker) raises LeaseLost and stops touching the session.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from shared import keys

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end
"""


class LeaseLost(RuntimeError):
    pass


class Lease:
    def __init__(self, client: aioredis.Redis, sid: str, worker_id: str, fence: int, ttl_ms: int) -> None:
        self.client = client
        self.sid = sid
        self.worker_id = worker_id
        self.fence = fence
        self.ttl_ms = ttl_ms
        self.value = f"{worker_id}:{fence}"
        self.lost = False

    @classmethod
    async def acquire(cls, client: aioredis.Redis, sid: str, worker_id: str, ttl_ms: int) -> Lease | None:
        """None when another worker holds the session."""
        if await client.exists(keys.lease(sid)):
            return None
        fence = int(await client.incr(keys.fence(sid)))
        lease = cls(client, sid, worker_id, fence, ttl_ms)
        ok = await client.set(keys.lease(sid), lease.value, nx=True, px=ttl_ms)
        return lease if ok else None

    async def check(self) -> None:
        if self.lost:
            raise LeaseLost(self.sid)
        current = await self.client.get(keys.lease(self.sid))
        if current is None or text_of(current) != self.value:
            self.lost = True
            raise LeaseLost(self.sid)

    async def renew(self) -> bool:
        if self.lost:
            return False
        ok = await self.client.eval(_RENEW, 1, keys.lease(self.sid), self.value, str(self.ttl_ms))  # type: ignore[misc]
        if not ok:
            self.lost = True
        return bool(ok)

    async def release(self) -> None:
        await self.client.eval(_RELEASE, 1, keys.lease(self.sid), self.value)  # type: ignore[misc]
        self.lost = True


async def wait_no_dormant_write(client: aioredis.Redis, sid: str, timeout_s: float = 15.0) -> None:
    """The proxy writes dormant state under `dormant-write`; read the disk only after it is gone."""
    deadline = time.monotonic() + timeout_s
    while await client.exists(keys.dormant_write(sid)):
        if time.monotonic() > deadline:
            return  # the lock has a PX of 10 s: a holder that died cannot block us past that
        await asyncio.sleep(0.05)


def text_of(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
