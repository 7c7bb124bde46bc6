"""How every Redis client of the services survives a Redis restart, a dropped connection, or a
burst of concurrent commands.

redis-py's default pool raises MaxConnectionsError once 100 connections are in use; a runtime holding
hundreds of live sessions (each run, outbox send and ack on its own connection for a moment) reached
it under bench-e2e and runs failed on it. The services' own clients use a pool that waits for a free
connection instead (`connect`); FastStream's pool, which cannot block, gets a larger cap.

redis-py retries nothing by default: after a restart, each pooled connection fails its next command
once ("Connection closed by server") and the error reaches the handler, which may leave a per-session
lock held until its timeout. With these options a command that fails on a dead connection is sent
again on a fresh one, with jittered backoff, for about three seconds (long enough for a restarting
Redis to load its AOF; longer outages still reach the caller, whose own retry or redelivery takes
over). A re-sent command may have run once already; every consumer is idempotent (prompt ids,
injection source ids, revision numbers), so a repeated XADD or INCR changes nothing they record.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError, TimeoutError


def reconnecting() -> dict[str, Any]:
    """Keyword arguments for `redis.asyncio.from_url` and FastStream's `RedisBroker`."""
    return {"retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=6),
            "retry_on_error": [ConnectionError, TimeoutError]}


MAX_CONNECTIONS = 512  # per client; Redis admits 10,000 clients by default
POOL_WAIT_S = 30.0


def connect(url: str, **options: Any) -> aioredis.Redis:
    """A client for `url` that reconnects and, when all its connections are busy, waits for one."""
    pool = BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=POOL_WAIT_S,
                                           **reconnecting(), **options)
    return aioredis.Redis.from_pool(pool)  # owns the pool: aclose() closes its connections


def broker_options() -> dict[str, Any]:
    """Keyword arguments for FastStream's `RedisBroker` (its pool raises when full: a larger cap)."""
    return {**reconnecting(), "max_connections": 2 * MAX_CONNECTIONS}
