"""A Redis restart costs the services nothing but a short wait: their clients (the service's own and
FastStream's) send a command that failed on a connection the restart killed again on a fresh one."""

from __future__ import annotations

import tempfile

import pytest

from services.stack import redis_server_binary
from shared.serving.service import make_context
from shared.settings import Settings
from shared.streams.bus import make_broker
from tests.support.needs import needs
from tests.support.ports import free_port
from tests.support.redis_server import start_redis_server

pytestmark = needs(None if redis_server_binary() else "needs redis-server")


async def test_clients_survive_a_redis_restart() -> None:
    port, data_dir = free_port(), tempfile.mkdtemp(prefix="gamma-redis-")
    url, proc = start_redis_server(appendonly=True, port=port, data_dir=data_dir)
    ctx = make_context("digest", Settings(REDIS_URL=url))
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

    ctx = make_context("runtime", Settings(REDIS_URL=redis_url))
    try:
        # 300 commands each holding a connection for a moment: redis-py's default pool (100) raises.
        results = await asyncio.gather(*(ctx.redis.blpop([f"burst:{i}"], timeout=0.2) for i in range(300)))
        assert results == [None] * 300
    finally:
        await ctx.redis.aclose()


async def test_a_half_open_connection_costs_one_read_timeout_then_a_fresh_connection(redis_url: str) -> None:
    from tests.support.faultproxy import FaultProxy

    base, _, db = redis_url.rpartition("/")
    link = FaultProxy("127.0.0.1", int(base.rsplit(":", 1)[1]), lifetime_s=60).start()
    ctx = make_context("digest", Settings(REDIS_URL=f"redis://127.0.0.1:{link.port}/{db}"))
    try:
        await ctx.redis.set("k", "v")
        accepted = link.counters.accepted
        assert link.half_open() >= 1  # the pooled connection now swallows everything, and never closes
        assert await ctx.redis.get("k") == b"v"  # its read timed out; the retry went out on a new one
        assert link.counters.accepted > accepted
    finally:
        await ctx.redis.aclose()
        link.stop()


async def test_a_partition_fails_a_command_at_its_deadline_and_the_client_resumes_after(redis_url: str) -> None:
    from redis.exceptions import TimeoutError as RedisTimeout

    from shared.redis.redis_errors import redis_failure
    from tests.support.faultproxy import FaultProxy

    base, _, db = redis_url.rpartition("/")
    link = FaultProxy("127.0.0.1", int(base.rsplit(":", 1)[1]), lifetime_s=60).start()
    ctx = make_context("digest", Settings(REDIS_URL=f"redis://127.0.0.1:{link.port}/{db}"))
    try:
        await ctx.redis.set("k", "v")
        link.partition()
        with pytest.raises(RedisTimeout) as failed:  # not a hang: the retries share one deadline
            await ctx.redis.get("k")
        assert redis_failure(failed.value)[0] == 504
        link.heal()
        assert await ctx.redis.get("k") == b"v"
    finally:
        link.heal()
        await ctx.redis.aclose()
        link.stop()
