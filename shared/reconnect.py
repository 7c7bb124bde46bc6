"""How every Redis client of the services survives a Redis restart or a dropped connection.

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

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError, TimeoutError


def reconnecting() -> dict[str, Any]:
    """Keyword arguments for `redis.asyncio.from_url` and FastStream's `RedisBroker`."""
    return {"retry": Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=6),
            "retry_on_error": [ConnectionError, TimeoutError]}
