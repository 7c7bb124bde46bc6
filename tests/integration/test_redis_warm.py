"""A runtime worker opens its Redis pool's connections at start (shared/redis/reconnect.py `warm`): the
turns that start together later find them open instead of connecting on the event loop."""

from __future__ import annotations

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import BlockingConnectionPool

from shared.redis.reconnect import connect, warm


async def test_warm_opens_the_connections_and_leaves_them_idle(redis_url: str) -> None:
    client = connect(redis_url)
    try:
        pool = client.connection_pool
        assert isinstance(pool, BlockingConnectionPool)
        assert await warm(client, 8) == 8
        assert len(pool._available_connections) == 8 and not pool._in_use_connections
        assert all(c.is_connected for c in pool._available_connections)
        await client.ping()
        assert len(pool._available_connections) == 8  # taken from the warm ones, none opened
        assert await warm(client, 0) == 0
    finally:
        await client.aclose()


async def test_a_cluster_client_has_nothing_to_warm() -> None:
    # Its pools are per node, opened as it learns the slots; a runtime on a cluster must still start.
    client = RedisCluster(host="127.0.0.1", port=1)  # not connected: the async client connects lazily
    try:
        assert await warm(client, 8) == 0  # type: ignore[arg-type]
    finally:
        await client.aclose()
