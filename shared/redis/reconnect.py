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

Timeouts by command class. redis-py 8 reads every reply under a 5 s socket timeout by default (5.x had
none): a blocking command that waits longer on the server (the proxy's BLPOP for a forwarded write's
reply, GAMMA_REPLY_TIMEOUT_S; an XREAD BLOCK) raised TimeoutError, was re-sent by the retry above six
times and reached the client as a 500 after ~37 s instead of its documented 504. So the timeout is
set explicitly for each class, the same under every client version `pyproject.toml` admits:
- ordinary commands (`connect`): COMMAND_TIMEOUT_S, retried as above;
- blocking commands (`connect_blocking`): a client of their own whose read timeout is the longest
  block it will be asked for plus BLOCK_GRACE_S. Only a dropped connection is retried there: a read
  that outlived its server-side block by the grace means the connection is dead, and sending the
  command again would double the wait the caller documented.

A network that stalls rather than drops (a partition, a half-open connection whose peer vanished
without a FIN: README "Reliability") answers nothing at all, so every attempt costs a whole read
timeout. Six retries of that held an HTTP request for ~40 s before it failed as a 500. So the retries
share a deadline (COMMAND_DEADLINE_S, `BudgetRetry`), which leaves room for the retry a half-open
pooled connection needs (its read times out, the next attempt opens a fresh connection) and fails the
command once it passes; an HTTP request turns that into a 504 (shared/redis/redis_errors.py). Every connection also has TCP keepalive (an
idle pooled or blocked connection to a vanished peer is found by the kernel) and a health check
before reuse after HEALTH_CHECK_S idle.
"""

from __future__ import annotations

import asyncio
import builtins
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError, TimeoutError

from shared.redis.redis_cluster import connect_cluster, is_cluster

MAX_CONNECTIONS = 512  # per client; Redis admits 10,000 clients by default
# Per node of a cluster client: its pool raises when full (no waiting), and each blocking inbox or SSE
# read of one slot holds a connection of its own (shared/streams/inbox.py, services/proxy/fanout.py).
CLUSTER_MAX_CONNECTIONS = 4 * MAX_CONNECTIONS
POOL_WAIT_S = 30.0
COMMAND_TIMEOUT_S = 5.0  # an ordinary command's reply (redis-py 8's default, made explicit for 5.x-7.x)
CONNECT_TIMEOUT_S = 2.0  # Redis is in the same network: a connect that takes longer is a partition
HEALTH_CHECK_S = 15.0  # a connection idle this long is PINGed before it is used again
BLOCK_GRACE_S = 5.0  # a blocking command's reply may come this long after its server-side block ends


T = TypeVar("T")
COMMAND_DEADLINE_S = 8.0  # all attempts of one ordinary command together (see above)


WATCH_TICK_S = 0.05  # how late past its deadline an attempt may be abandoned (plus the loop's own lag)


class _Attempt:
    """One attempt of one command, watched for its deadline (`_Watch`)."""

    __slots__ = ("cancelling", "deadline", "expired", "task")

    def __init__(self, task: asyncio.Task[Any], deadline: float) -> None:
        self.task = task
        self.deadline = deadline  # the loop's clock
        self.cancelling = task.cancelling()
        self.expired = False


class _Watch:
    """The deadlines of the attempts in flight on one event loop, looked at by one timer every
    WATCH_TICK_S while any is in flight. `asyncio.timeout` made and cancelled a timer of the loop's
    for every command (beside the two redis-py makes for its send and read): a sixth of the runtime's
    Redis cost under bench-e2e (bench/README.md "bench-e2e")."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.attempts: dict[_Attempt, None] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, attempt: _Attempt) -> None:
        self.attempts[attempt] = None
        if self._timer is None:
            self._timer = self.loop.call_later(WATCH_TICK_S, self._tick)

    def _tick(self) -> None:
        self._timer = None
        now = self.loop.time()
        for attempt in [a for a in self.attempts if a.deadline <= now]:
            del self.attempts[attempt]
            attempt.expired = True
            attempt.task.cancel()
        if self.attempts:
            self._timer = self.loop.call_later(WATCH_TICK_S, self._tick)

    def settle(self, attempt: _Attempt) -> bool:
        """The attempt ended: True when its deadline cancelled it (the cancel taken back as
        `asyncio.timeout` does: only a cancel from elsewhere still stands)."""
        self.attempts.pop(attempt, None)
        return attempt.expired and attempt.task.uncancel() <= attempt.cancelling


class BudgetRetry(Retry):
    """redis-py's retry with a deadline shared by all attempts of one command: an attempt still
    waiting when it passes is abandoned (its task cancelled as `asyncio.timeout` would, so its
    connection is dropped as on any cancelled read) and the command fails with redis' TimeoutError."""

    def __init__(self, retries: int, deadline_s: float = COMMAND_DEADLINE_S,
                 supported_errors: tuple[type[Exception], ...] = (ConnectionError, TimeoutError)) -> None:
        super().__init__(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries, supported_errors=supported_errors)
        self.deadline_s = deadline_s
        self._watch: _Watch | None = None

    def _watching(self, loop: asyncio.AbstractEventLoop) -> _Watch:
        if self._watch is None or self._watch.loop is not loop:
            self._watch = _Watch(loop)
        return self._watch

    async def _attempt(self, do: Callable[[], Awaitable[T]], deadline: float) -> T:
        """`do()` abandoned at `deadline` (monotonic); builtins' TimeoutError then, as `asyncio.timeout`."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:  # not in a task: nothing to cancel, so the plain timeout
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                return await do()
        attempt = _Attempt(task, loop.time() + max(0.0, deadline - time.monotonic()))
        watch = self._watching(loop)
        watch.add(attempt)
        try:
            result = await do()
        except BaseException as exc:
            if watch.settle(attempt) and isinstance(exc, asyncio.CancelledError):
                raise builtins.TimeoutError from exc
            raise
        watch.settle(attempt)
        return result

    async def call_with_retry(self, do: Callable[[], Awaitable[T]], fail: Callable[..., Any],  # type: ignore[override]
                              is_retryable: Callable[[Exception], bool] | None = None,
                              with_failure_count: bool = False) -> T:
        self._backoff.reset()
        deadline, failures = time.monotonic() + self.deadline_s, 0
        while True:
            try:
                try:
                    return await self._attempt(do, deadline)
                except builtins.TimeoutError as exc:
                    raise TimeoutError(f"no reply from Redis within {self.deadline_s:g} s") from exc
            except self._supported_errors as error:
                if is_retryable is not None and not is_retryable(error):
                    raise
                failures += 1
                await (fail(error, failures) if with_failure_count else fail(error))
                if failures > self._retries or time.monotonic() >= deadline:
                    raise error
                await asyncio.sleep(min(self._backoff.compute(failures), max(0.0, deadline - time.monotonic())))


def keepalive() -> dict[str, Any]:
    """TCP keepalive on every connection: idle 10 s, then a probe every 5 s, dead after 3 unanswered."""
    options = {getattr(socket, name): value for name, value in
               (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)) if hasattr(socket, name)}
    return {"socket_keepalive": True, "socket_keepalive_options": options}


def reconnecting() -> dict[str, Any]:
    """Keyword arguments for `redis.asyncio.from_url` and FastStream's `RedisBroker`."""
    return {"retry": BudgetRetry(retries=6), "retry_on_error": [ConnectionError, TimeoutError],
            "socket_timeout": COMMAND_TIMEOUT_S, "socket_connect_timeout": CONNECT_TIMEOUT_S,
            "health_check_interval": HEALTH_CHECK_S, **keepalive()}


def connect(url: str, **options: Any) -> aioredis.Redis:
    """A client for `url` that reconnects and, when all its connections are busy, waits for one.
    For ordinary commands only: a command blocking on the server longer than COMMAND_TIMEOUT_S needs
    `connect_blocking`. When `url` names a node of a Redis Cluster (shared/redis/redis_cluster.py), a
    cluster client: its pools cannot wait for a free connection, so each node gets a larger cap."""
    options = {**reconnecting(), **options}
    if is_cluster(url):
        return connect_cluster(url, CLUSTER_MAX_CONNECTIONS, **options)
    pool = BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=POOL_WAIT_S, **options)
    return aioredis.Redis.from_pool(pool)  # owns the pool: aclose() closes its connections


async def warm(client: aioredis.Redis, n: int) -> int:
    """Open up to `n` connections of `client`'s pool now and put them back idle: what a burst would
    otherwise open on the event loop, one `connect` and handshake each. Returns how many are open."""
    # A cluster client keeps a pool per node, opened as it learns the slots: nothing to warm here.
    pool = getattr(client, "connection_pool", None)
    if n <= 0 or not isinstance(pool, BlockingConnectionPool):
        return 0
    n = min(n, pool.max_connections)
    held = await asyncio.gather(*(pool.get_connection() for _ in range(n)), return_exceptions=True)
    opened = [c for c in held if not isinstance(c, BaseException)]
    for connection in opened:
        await pool.release(connection)
    return len(opened)


def connect_blocking(url: str, longest_block_s: float, **options: Any) -> aioredis.Redis:
    """A client for blocking commands (BLPOP, XREAD BLOCK) that block at most `longest_block_s`."""
    return connect(url, socket_timeout=longest_block_s + BLOCK_GRACE_S,
                   retry=BudgetRetry(retries=3, deadline_s=longest_block_s + BLOCK_GRACE_S + CONNECT_TIMEOUT_S,
                                     supported_errors=(ConnectionError,)),
                   retry_on_error=[ConnectionError], **options)


def broker_options() -> dict[str, Any]:
    """Keyword arguments for FastStream's `RedisBroker` (its pool raises when full: a larger cap)."""
    return {**reconnecting(), "max_connections": 2 * MAX_CONNECTIONS}
