"""Redis Cluster: detected once per URL, and the few operations whose form differs on a cluster.

`REDIS_URL` may name any node of a cluster; `shared.redis.reconnect.connect` then builds redis-py's
asyncio `RedisCluster` (it discovers the other nodes and follows MOVED/ASK and failovers by itself).
Detection asks the node `INFO cluster` at start-up (`cluster_enabled:1`); `GAMMA_REDIS_CLUSTER=1`
(or `0`) forces the answer, for a node that is not reachable yet or a proxy in front of a cluster.

What the services had to respect on a cluster (README "Redis Cluster"):
- a multi-key command, a Lua script and a transaction name keys of ONE slot: the per-session keys
  share the `{sid}` hash tag, the service streams (`gamma:lifecycle`, ...) each live in a slot of their
  own and are only ever touched one at a time; `mget` below splits a cross-slot MGET;
- a non-transactional pipeline may span slots (redis-py sends one batch per node);
- the raw blocking reads (the runtime's inbox shards, the proxy's SSE fan-out) each name streams of
  one slot and run on a connection to that slot's primary (`node_connection`);
- an acknowledgment that must outlive a primary's failover is followed by `WAIT` on the connection
  that wrote it (`durable`), so a replica has it before the client hears "done".
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection
from redis.crc import key_slot
from redis.exceptions import AskError, ConnectionError, RedisError, ResponseError, TimeoutError

from shared.redis import replicas
from shared.settings import env_setting

_DETECTED: dict[str, bool] = {}
PROBE_TIMEOUT_S = 1.0


def forced() -> bool | None:
    """GAMMA_REDIS_CLUSTER: 1/true/yes forces a cluster client, 0/false/no a single-node one."""
    forced: bool | None = env_setting("redis_cluster")
    return forced


def extra_nodes() -> list[tuple[str, int]]:
    """GAMMA_REDIS_CLUSTER_NODES: more nodes of the cluster (`host:port,host:port`), tried when the one
    REDIS_URL names is down (a service restarted after that node died still finds the cluster)."""
    out = []
    for item in str(env_setting("redis_cluster_nodes")).split(","):
        host, sep, port = item.strip().rpartition(":")
        if sep and host and port.isdigit():
            out.append((host, int(port)))
    return out


def node_urls(url: str) -> list[str]:
    """`url` and the same URL at each of `extra_nodes()` (credentials and options kept)."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    return [url] + [urlunsplit(parts._replace(netloc=(auth + "@" if auth else "") + f"{host}:{port}"))
                    for host, port in extra_nodes()]


def is_cluster(url: str) -> bool:
    """Whether `url` names a node of a Redis Cluster (asked once per URL, then remembered). A node that
    does not answer yet counts as a single Redis for now (the services wait for Redis without blocking
    start-up; `ensure_mode` then finds out and restarts the service if it was a cluster after all)."""
    choice = forced()
    if choice is not None:
        return choice
    if url not in _DETECTED:
        probed = next((p for p in map(_probe, node_urls(url)) if p is not None), None)
        if probed is None:
            return False
        _DETECTED[url] = probed
    return _DETECTED[url]


def _probe(url: str) -> bool | None:
    """One `INFO cluster`: True/False, None when the node does not answer."""
    client = redis.Redis.from_url(url, socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S)
    try:
        info = client.info("cluster")
        return int(info.get("cluster_enabled", 0)) == 1
    except ResponseError:
        return False  # a server without the section (or a proxy refusing INFO): not a cluster
    except (ConnectionError, TimeoutError, OSError):
        return None
    finally:
        client.close()


def ensure_mode(client: Any, url: str) -> None:
    """Once Redis answers: a service whose single-node client was built while a cluster node was still
    down must not run against the cluster (every other key would answer MOVED). It stops, and its
    restart (compose, Kubernetes) builds a cluster client."""
    if cluster_of(client) is None and forced() is None and any(_probe(u) for u in node_urls(url)):
        _DETECTED[url] = True
        raise RuntimeError("REDIS_URL names a Redis Cluster node that did not answer at start-up: restart the "
                           "service (or set GAMMA_REDIS_CLUSTER=1)")


def cluster_url(url: str) -> str:
    """A cluster has only db 0: a trailing `/0` is accepted, another db number is refused."""
    head, sep, tail = url.rpartition("/")
    if sep and "//" in head and tail.split("?", 1)[0].isdigit():
        if int(tail.split("?", 1)[0]) != 0:
            raise ValueError(f"a Redis Cluster has only db 0: {url!r}")
        return head + ("?" + tail.split("?", 1)[1] if "?" in tail else "")
    return url


def connect_cluster(url: str, max_connections: int, **options: Any) -> aioredis.Redis:
    """An asyncio `RedisCluster` for `url` (any node). Typed as `aioredis.Redis`: it answers every
    command the services send with the same signature, and the few that differ go through this module."""
    options.pop("retry_on_error", None)  # RedisCluster retries connection errors and timeouts itself
    nodes = [ClusterNode(host, port) for host, port in extra_nodes()]
    client = RedisCluster.from_url(cluster_url(url), max_connections=max_connections,
                                   **({"startup_nodes": nodes} if nodes else {}), **options)
    return cast(aioredis.Redis, client)


def cluster_of(client: Any) -> RedisCluster | None:
    return client if isinstance(client, RedisCluster) else None


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


def slot_group(client: Any, key: str) -> int | None:
    """What keys must share to be named by one command on this client: their slot on a cluster;
    nothing (None) on a single Redis."""
    return slot(key) if cluster_of(client) is not None else None


def node_name(client: Any, key: str) -> str:
    """`host:port` of the primary that holds `key` in the client's slot map ("" on a single Redis, or
    while no node holds the slot: a read routed there fails and is retried)."""
    cluster = cluster_of(client)
    if cluster is None:
        return ""
    with contextlib.suppress(RedisError, AttributeError):
        node = cluster.get_node_from_key(key)
        if node is not None:
            return str(node.name)
    return ""


async def mget(client: aioredis.Redis, names: Sequence[str]) -> list[Any]:
    """MGET of keys that may live in several slots (one MGET per slot on a cluster)."""
    cluster = cluster_of(client)
    if cluster is not None:
        return list(await cluster.mget_nonatomic(list(names)))
    return list(await client.mget(list(names)))


@contextlib.asynccontextmanager
async def node_connection(client: aioredis.Redis, key: str) -> AsyncIterator[Connection]:
    """A connection of its own to the primary that holds `key` (the whole connection: for a raw
    blocking read, or a write followed by WAIT). The caller disconnects it when a reply may still be
    on its way; it goes back to its pool either way."""
    cluster = cluster_of(client)
    if cluster is None:
        pool = client.connection_pool
        conn = await pool.get_connection()
        try:
            yield conn
        finally:
            await pool.release(conn)
        return
    await cluster.initialize()
    node = cluster.get_node_from_key(key)
    if node is None:  # pragma: no cover - get_node_from_key raises for an uncovered slot
        raise ConnectionError(f"no node holds {key!r}")
    conn = node.acquire_connection()
    try:
        yield conn
    finally:
        node.release(conn)


async def node_command(client: aioredis.Redis, key: str, *args: Any) -> Any:
    """A keyless command (CLIENT UNBLOCK) sent to the node that holds `key`."""
    cluster = cluster_of(client)
    if cluster is None:
        return await client.execute_command(*args)
    await cluster.initialize()
    return await cluster.execute_command(*args, target_nodes=cluster.get_node_from_key(key))


async def refresh_route(client: aioredis.Redis, key: str) -> None:
    """After a raw read on `key`'s node failed: one ordinary command on the key, which lets the
    cluster client notice a failover or a moved slot (MOVED, a dead node) and update its slot map,
    so the next `node_connection` reaches the new primary."""
    if cluster_of(client) is not None:
        with contextlib.suppress(RedisError, OSError):
            await client.exists(key)


# WAIT for this many replicas, at most this long (ms), after an acknowledged write (GAMMA_REDIS_WAIT_MS;
# 0 turns it off). Used only on a cluster: a single Redis has no failover to survive.
WAIT_REPLICAS = 1


def wait_ms() -> int:
    return int(env_setting("redis_wait_ms"))


async def durable(client: aioredis.Redis, key: str, *command: Any, then: Sequence[tuple[Any, ...]] = ()) -> Any:
    """Run `command` (on `key`'s slot) and, on a cluster, `WAIT 1 <ms>` on the same connection, so
    the write is on a replica before the caller acknowledges it: a primary killed right after
    cannot take it along (its replica is promoted with it). A replica that does not confirm within
    the time does not fail the write (WAIT is not a rollback): it is counted and logged, and a primary
    found to have no replica at all is written without WAIT for a second (shared/redis/replicas.py).
    On a single Redis: the command alone.
    `then`: commands sent right after it on the same connection, on a cluster only (the inbox's ring:
    ordered after the write, one round trip, their replies ignored). Returns `command`'s reply."""
    if cluster_of(client) is None:
        return await client.execute_command(*command)
    budget = wait_ms()
    if budget <= 0 and not then:
        return await client.execute_command(*command)
    waits, confirmed = False, 0
    try:
        async with node_connection(client, key) as conn:
            waits = budget > 0 and not replicas.known_without(replicas.node_of(conn))
            tail = [*then, *([("WAIT", WAIT_REPLICAS, budget)] if waits else [])]
            try:
                reply, last = await _exchange(conn, [command, *tail])
                confirmed = last if waits and isinstance(last, int) else 0
                if waits and confirmed < WAIT_REPLICAS:
                    await replicas.check_role(conn, WAIT_REPLICAS)
            except BaseException:
                await conn.disconnect()  # a reply may still be on its way: the connection is spent
                raise
    except (ConnectionError, TimeoutError):
        await refresh_route(client, key)
        raise
    if isinstance(reply, AskError):  # MOVED or ASK: the slot moved meanwhile; no WAIT this time
        await refresh_route(client, key)
        result = await client.execute_command(*command)
        for extra in then:
            await client.execute_command(*extra)
        return result
    if isinstance(reply, ResponseError):  # nothing was written: nothing to confirm
        raise reply
    if budget > 0 and confirmed < WAIT_REPLICAS:
        replicas.Unconfirmed.note(key, confirmed, budget, waited=waits)
    return reply


async def _exchange(conn: Connection, commands: list[tuple[Any, ...]]) -> tuple[Any, Any]:
    """`commands` in one round trip: the first one's reply (a ResponseError returned, not raised: the
    replies that follow are still read) and the last one's (None when it failed or there is only one)."""
    await conn.send_packed_command(conn.pack_commands(commands))
    reply: Any
    try:
        reply = await conn.read_response()
    except ResponseError as exc:
        reply = exc
    last: Any = None
    for _ in commands[1:]:  # best effort: see `durable`
        try:
            last = await conn.read_response()
        except ResponseError:
            last = None
    return reply, last
