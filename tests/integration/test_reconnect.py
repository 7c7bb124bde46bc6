"""A Redis restart costs the services nothing but a short wait: their clients (the service's own and
FastStream's) send a command that failed on a connection the restart killed again on a fresh one."""

from __future__ import annotations

import tempfile

import pytest

from services.stack import redis_server_binary
from shared.bus import make_broker
from shared.service import make_context
from shared.settings import Settings
from tests.support.ports import free_port
from tests.support.redis_server import start_redis_server

pytestmark = pytest.mark.skipif(redis_server_binary() is None, reason="needs redis-server")


async def test_clients_survive_a_redis_restart() -> None:
    port, data_dir = free_port(), tempfile.mkdtemp(prefix="gamma-redis-")
    url, proc = start_redis_server(appendonly=True, port=port, data_dir=data_dir)
    ctx = make_context("digest", Settings(REDIS_URL=url))  # type: ignore[call-arg]
    broker = make_broker(url)
    await broker.connect()
    try:
        await ctx.redis.set("k", "before")
        await broker.publish({"n": 1}, stream="s")
        proc.kill()
        proc.wait()
        _, proc = start_redis_server(appendonly=True, port=port, data_dir=data_dir)
        # Every pooled connection died with the old process: the next command on each is retried.
        assert await ctx.redis.get("k") == b"before"
        await ctx.redis.set("k", "after")
        await broker.publish({"n": 2}, stream="s")
        assert await ctx.redis.xlen("s") == 2
    finally:
        await broker.stop()
        await ctx.redis.aclose()
        proc.kill()


async def test_a_burst_wider_than_the_default_pool_waits_instead_of_failing(redis_url: str) -> None:
    import asyncio

    ctx = make_context("runtime", Settings(REDIS_URL=redis_url))  # type: ignore[call-arg]
    try:
        # 300 commands each holding a connection for a moment: redis-py's default pool (100) raises.
        results = await asyncio.gather(*(ctx.redis.blpop([f"burst:{i}"], timeout=0.2) for i in range(300)))
        assert results == [None] * 300
    finally:
        await ctx.redis.aclose()
