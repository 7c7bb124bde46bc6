"""What `durable` (shared/redis/redis_cluster.py) learns about a primary's replicas from its WAITs.

- A write no replica confirmed within `GAMMA_REDIS_WAIT_MS` still stands (WAIT is not a rollback), and it
  is the only kind of acknowledged write a failover can lose (docs/operations.md "Redis Cluster"). Each is
  counted (`Unconfirmed.count`, exported as `gamma_redis_writes_unconfirmed_total`) and logged as
  `redis_write_unconfirmed` with its key, at most LOG_PER_WINDOW lines a window.
- A primary without any replica (a promoted replica whose old primary has not come back) would make every
  durable write on it wait the whole budget for a confirmation that cannot come. After a WAIT that no
  replica answered, the primary's ROLE says whether it has one at all; one with none is remembered for
  NO_REPLICA_S, its writes skip WAIT meanwhile (counted as unconfirmed), and the first write after that
  waits again, so a replica that came back is used within a second.
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from redis.asyncio.connection import Connection
from redis.exceptions import RedisError

_log = structlog.get_logger(__name__)
NO_REPLICA_S = 1.0


class Unconfirmed:
    """The process's count of writes acknowledged unconfirmed. One writer (`note`); read by /metrics."""

    LOG_PER_WINDOW = 20
    WINDOW_S = 10.0
    count = 0
    _window_start = 0.0
    _logged = 0

    @classmethod
    def note(cls, key: str, confirmed: int, budget_ms: int, waited: bool) -> None:
        cls.count += 1
        now = time.monotonic()
        if now - cls._window_start >= cls.WINDOW_S:
            cls._window_start, cls._logged = now, 0
        cls._logged += 1
        if cls._logged <= cls.LOG_PER_WINDOW:
            _log.warning("redis_write_unconfirmed", key=key, replicas=confirmed, wait_ms=budget_ms if waited else 0,
                         unconfirmed_total=cls.count)


_without_replica: dict[str, float] = {}  # "host:port" -> until (monotonic)


def node_of(conn: Connection) -> str:
    return f"{conn.host}:{conn.port}"


def known_without(node: str) -> bool:
    """True while `node` is remembered as a primary without any replica."""
    until = _without_replica.get(node)
    if until is None:
        return False
    if time.monotonic() < until:
        return True
    del _without_replica[node]
    return False


async def check_role(conn: Connection, needed: int) -> None:
    """After a WAIT that fewer than `needed` replicas answered: ROLE on the same connection; a primary
    listing fewer replicas than that is remembered (`known_without`). A reply of another shape (not a
    primary any more: a failover under way) teaches nothing, and neither does a ROLE that failed: the
    write it follows stands, so its caller hears of it (the connection is dropped, its state unknown)."""
    try:
        await conn.send_command("ROLE")
        role: Any = await conn.read_response()
    except (RedisError, OSError):
        await conn.disconnect()
        return
    if not isinstance(role, list | tuple) or len(role) < 3:
        return
    kind = role[0].decode() if isinstance(role[0], bytes) else str(role[0])
    if kind == "master" and isinstance(role[2], list | tuple) and len(role[2]) < needed:
        _without_replica[node_of(conn)] = time.monotonic() + NO_REPLICA_S
        _log.warning("redis_primary_without_replica", node=node_of(conn), skip_wait_s=NO_REPLICA_S)
