"""Inbox doorbells on a Redis Cluster: one sharded Pub/Sub connection per primary, not one blocked
read per session.

A blocking XREADGROUP names streams of one slot only, and with 16,384 slots almost every live session
needed its own blocked read and connection. Instead every inbox append also SPUBLISHes a ring on
`gamma:{sid}:inbox-ring` (the same slot, in the same script: shared/streams/inbox.py), the worker subscribes
to its sessions' rings over one connection per node that holds them, and `due` says which sessions to
read now; the reader then reads them without blocking, batched per node in one pipeline.

Pub/Sub is fire and forget: a ring published while a connection was down or a slot was moving is lost.
A connection can also die without a word (a half-open TCP connection behind a NAT or a frozen node):
a node silent for KEEPALIVE_S gets a PING, and one that does not answer within PONG_TIMEOUT_S is
dropped like a failed one, then subscribed again. Two things cover the rings lost meanwhile. A confirmed SSUBSCRIBE counts as a ring (whatever was appended before the
subscription is read once it is in place), and every `SWEEP_INTERVAL_S` every held session is due
anyway. A node whose connection fails (a killed primary) or answers an error (MOVED after a failover)
is dropped; its sessions are routed again through the cluster client's refreshed slot map.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisError

from shared.redis import keys, redis_cluster
from shared.redis.redis_wire import text

log = structlog.get_logger()

# Every held session is read this often even without a ring (a ring lost to a reconnect or failover).
SWEEP_INTERVAL_S = 1.0
# A session whose read failed (its node down, its slot moved) is read again after this long, not at
# once: a dead node must not turn the read loop into a busy loop.
RETRY_S = 0.2
# A subscription connection silent this long is pinged; no answer within PONG_TIMEOUT_S drops it.
KEEPALIVE_S = 15.0
PONG_TIMEOUT_S = 5.0


@dataclass
class _Node:
    name: str
    conn: AbstractConnection
    sessions: set[str] = field(default_factory=set)  # subscribed, or SSUBSCRIBE sent
    leaving: set[str] = field(default_factory=set)  # removed: SUNSUBSCRIBE still to send
    task: asyncio.Task[None] | None = None  # the listener; done = the node is to be dropped
    heard_at: float = field(default_factory=time.monotonic)  # the last reply of any kind
    pinged_at: float | None = None  # a PING is out, unanswered


@dataclass
class RingStats:
    rings: int = 0
    sweeps: int = 0
    subscribes: int = 0
    dropped_nodes: int = 0


class NodeRings:
    """Which held sessions to read now: rung since the last call, or all of them at a sweep."""

    def __init__(self, client: aioredis.Redis, sweep_interval_s: float = SWEEP_INTERVAL_S,
                 keepalive_s: float = KEEPALIVE_S, pong_timeout_s: float = PONG_TIMEOUT_S) -> None:
        cluster = redis_cluster.cluster_of(client)
        if cluster is None:
            raise ValueError("inbox rings need a Redis Cluster client")
        self._client, self._cluster = client, cluster
        self._sweep_interval_s = sweep_interval_s
        self._keepalive_s, self._pong_timeout_s = keepalive_s, pong_timeout_s
        self._sessions: set[str] = set()
        self._unrouted: set[str] = set()  # held, not subscribed on any node yet
        self._node_of: dict[str, str] = {}
        self._nodes: dict[str, _Node] = {}
        self._rung: set[str] = set()
        self._retry: set[str] = set()
        self._retry_at = 0.0
        self._wake = asyncio.Event()
        self._next_sweep = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self.stats = RingStats()

    @property
    def sessions(self) -> frozenset[str]:
        return frozenset(self._sessions)

    @property
    def connections(self) -> int:
        return len(self._nodes)

    def add(self, sid: str) -> None:
        self._sessions.add(sid)
        if sid not in self._node_of:
            self._unrouted.add(sid)
        for node in self._nodes.values():
            node.leaving.discard(sid)  # removed and taken back before its SUNSUBSCRIBE went out
        self._wake.set()  # the next `due` subscribes it (SSUBSCRIBE twice is harmless: one more ring)

    def remove(self, sid: str) -> None:
        self._sessions.discard(sid)
        self._unrouted.discard(sid)
        self._rung.discard(sid)
        self._retry.discard(sid)
        name = self._node_of.pop(sid, None)
        if name is not None and name in self._nodes:
            self._nodes[name].sessions.discard(sid)
            self._nodes[name].leaving.add(sid)

    def ring(self, sid: str) -> None:
        """Read `sid` at the next `due` (rung, subscribed, or its last read filled its COUNT)."""
        if sid in self._sessions:
            self._rung.add(sid)
            self._wake.set()

    def ring_later(self, sid: str) -> None:
        """Read `sid` again after RETRY_S (its read failed)."""
        if sid in self._sessions:
            if not self._retry:
                self._retry_at = time.monotonic() + RETRY_S
            self._retry.add(sid)

    async def due(self, block_ms: int) -> set[str]:
        """The sessions to read now; waits up to `block_ms` for a ring, a retry or the next sweep."""
        await self._maintain()
        until = min(self._next_sweep, self._retry_at if self._retry else math.inf)
        wait_s = min(block_ms / 1000, until - time.monotonic())
        if not self._rung and wait_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)
        self._wake.clear()
        if self._retry and time.monotonic() >= self._retry_at:
            self._rung |= self._retry
            self._retry = set()
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self._sweep_interval_s
            self._rung.clear()
            self.stats.sweeps += 1
            return set(self._sessions)
        rung, self._rung = self._rung, set()
        return rung & self._sessions

    def refresh(self, key: str) -> None:
        """Let the cluster client learn the slot map again (after a failed read or subscription), in
        the background and one at a time: against a dead primary it retries for seconds, and the
        sessions of the healthy nodes must not wait for that."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(redis_cluster.refresh_route(self._client, key))

    async def close(self) -> None:
        if self._refreshing is not None:
            self._refreshing.cancel()
            with contextlib.suppress(BaseException):
                await self._refreshing
        for node in list(self._nodes.values()):
            await self._close_node(node)
        self._nodes.clear()

    # ------------------------------------------------------------ subscriptions

    async def _maintain(self) -> None:
        for node in list(self._nodes.values()):
            await self._keep_alive(node)
            if node.task is None or node.task.done():
                await self._drop(node)
            elif node.leaving:
                leaving, node.leaving = node.leaving, set()
                try:
                    await self._send(node, [("SUNSUBSCRIBE", keys.inbox_ring(sid)) for sid in sorted(leaving)])
                except (RedisError, OSError):
                    node.task.cancel()  # the connection is gone: dropped (and its sessions routed) next time
            if node.name in self._nodes and not node.sessions and not node.leaving:
                await self._close_node(node)
                del self._nodes[node.name]
        if self._unrouted:
            await self._subscribe(set(self._unrouted))

    async def _keep_alive(self, node: _Node) -> None:
        """PING a silent connection; cancel the listener of one that leaves a PING unanswered."""
        if node.task is None or node.task.done():
            return
        now = time.monotonic()
        if node.pinged_at is not None and now - node.pinged_at > self._pong_timeout_s:
            log.warning("inbox_ring_node_silent", node=node.name, silent_s=round(now - node.heard_at, 1))
            node.task.cancel()  # dropped by the caller once the task is done
            with contextlib.suppress(BaseException):
                await node.task
        elif node.pinged_at is None and now - node.heard_at > self._keepalive_s:
            node.pinged_at = now
            try:
                await self._send(node, [("PING", "gamma")])
            except (RedisError, OSError):
                node.task.cancel()

    async def _subscribe(self, sids: set[str]) -> None:
        try:
            await self._cluster.initialize()
            by_node: dict[str, tuple[ClusterNode, list[str]]] = {}
            for sid in sorted(sids):
                target = self._cluster.get_node_from_key(keys.inbox(sid))
                if target is None:
                    raise RedisError(f"no node holds the slot of {sid}")
                by_node.setdefault(target.name, (target, []))[1].append(sid)
        except (RedisError, OSError) as exc:  # no node holds the slot (a failover under way): retry later
            log.warning("inbox_ring_route_failed", error=str(exc)[:300])
            return
        for name, (target, group) in by_node.items():
            try:
                node = self._nodes.get(name) or await self._open(target)
                await self._send(node, [("SSUBSCRIBE", keys.inbox_ring(sid)) for sid in group])
            except (RedisError, OSError) as exc:
                log.warning("inbox_ring_subscribe_failed", node=name, error=str(exc)[:300])
                self.refresh(keys.inbox(group[0]))
                continue
            node.sessions.update(group)
            for sid in group:
                self._node_of[sid] = name
            self._unrouted.difference_update(group)
            self.stats.subscribes += len(group)

    async def _open(self, target: ClusterNode) -> _Node:
        conn: AbstractConnection = target.connection_class(**target.connection_kwargs)
        await conn.connect()
        node = _Node(name=target.name, conn=conn)
        node.task = asyncio.ensure_future(self._listen(node))
        self._nodes[node.name] = node
        return node

    async def _send(self, node: _Node, commands: list[tuple[str, str]]) -> None:
        if commands:
            await node.conn.send_packed_command(node.conn.pack_commands(commands), check_health=False)

    async def _listen(self, node: _Node) -> None:
        """Rings (`smessage`) and confirmations (`ssubscribe`) both make a session due. It returns
        on any failure: a lost connection, or an error reply (a slot no longer on this node)."""
        try:
            while True:
                reply: Any = await node.conn.read_response(timeout=math.inf, push_request=True)
                node.heard_at, node.pinged_at = time.monotonic(), None  # any reply proves it alive
                if not isinstance(reply, list) or len(reply) < 2:
                    continue
                kind = text(reply[0])
                if kind not in ("smessage", "ssubscribe", "sunsubscribe"):
                    continue  # "pong": the keep-alive's answer
                sid = keys.inbox_stream_sid(text(reply[1]))
                if kind in ("smessage", "ssubscribe"):
                    self.stats.rings += kind == "smessage"
                    self.ring(sid)
                elif kind == "sunsubscribe" and sid in node.sessions:
                    # Not asked for: the slot left this node (resharding, a demoted primary).
                    self._reroute(node, sid)
        except (RedisError, OSError) as exc:
            log.warning("inbox_ring_node_lost", node=node.name, error=str(exc)[:300])
        finally:
            self._wake.set()  # `due` drops this node and routes its sessions again

    def _reroute(self, node: _Node, sid: str) -> None:
        node.sessions.discard(sid)
        self._node_of.pop(sid, None)
        if sid in self._sessions:
            self._unrouted.add(sid)
            self._rung.add(sid)

    async def _drop(self, node: _Node) -> None:
        self.stats.dropped_nodes += 1
        for sid in list(node.sessions):
            self._reroute(node, sid)
        await self._close_node(node)
        del self._nodes[node.name]
        if self._unrouted:
            self.refresh(keys.inbox(next(iter(self._unrouted))))

    @staticmethod
    async def _close_node(node: _Node) -> None:
        if node.task is not None and not node.task.done():
            node.task.cancel()
            with contextlib.suppress(BaseException):
                await node.task
        with contextlib.suppress(Exception):
            await node.conn.disconnect()
