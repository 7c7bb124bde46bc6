"""Shared fixtures: a real Redis (own db per test), a data dir, and the five services as processes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from shared.serving import cancel_safe
from tests.support import group_order, keepalive, needs, teardown_guard
from tests.support.ports import xdist_worker
from tests.support.redis_server import base_redis_url, own_redis_url
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}

DB_COUNTER = "gamma:test:db-counter"

# Under pytest-xdist (`make test`) the tests of one group run on one worker, in order: a directory's
# group below, else the test's module (its module-scoped stack is started once, on one worker).
DIRECTORY_GROUPS = {
    "tests/cluster/": "cluster",  # one local Redis Cluster for the directory (tests/cluster/conftest.py)
}


def group_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return next((group for prefix, group in DIRECTORY_GROUPS.items() if path.startswith(prefix)), path)


def pytest_configure(config: pytest.Config) -> None:
    cancel_safe.install()  # the services' asyncio (shared/serving/service.py serve) in the test process too
    teardown_guard.install()
    keepalive.install()  # idle connections dropped before uvicorn closes them (tests/support/keepalive.py)
    config.addinivalue_line("markers", f"{needs.MARK}(why_missing): skipped without a tool, failed under CI "
                            "(tests/support/needs.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    needs.check(item)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup`: work units by group_of. (xdist's own loadgroup reads `xdist_group` marks by
    renaming each item's node id, which pytest 9 no longer lets it do: every test became a unit of
    its own, and a module's stack was started on every worker.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if xdist_worker() is not None:
        longest_first(config, items)


def longest_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The groups are handed out longest first, by the measured seconds of tests/support/group_seconds.json
    (`make test` passes --no-loadscope-reorder, which keeps this order), so that none of the long ones
    starts last and stretches the run; a `quiet_end` group (the soak, a measurement over minutes) late,
    beside the shortest groups only, not the busiest start (tests/support/group_order.py). Each group's
    tests keep their own order."""
    default = float(config.getini("timeout") or 0)
    groups: dict[str, group_order.Group] = {}
    for item in items:
        group = groups.setdefault(group_of(item.nodeid), group_order.Group(group_of(item.nodeid)))
        mark = item.get_closest_marker("timeout")
        group.tests += 1
        group.longest_timeout = max(group.longest_timeout,
                                    float(mark.args[0]) if mark is not None and mark.args else default)
        group.quiet_end = group.quiet_end or item.get_closest_marker("quiet_end") is not None
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    rank = {name: i for i, name in enumerate(group_order.hand_out_order(list(groups.values()),
                                                                       group_order.known_seconds(), workers))}
    items.sort(key=lambda item: rank[group_of(item.nodeid)])  # stable: a group's tests keep their order


@pytest.fixture(scope="session")
def redis_base() -> str:
    """Under pytest-xdist every worker has a redis-server of its own (nothing a test does to its
    Redis, such as FLUSHALL, CONFIG SET or a killed client, reaches another worker's tests); without
    a binary the workers share one Redis and split its dbs."""
    if xdist_worker() is not None:
        own = own_redis_url()
        if own is not None:
            _own_servers.add(own)
            return own
    return base_redis_url()


_own_servers: set[str] = set()
_held_dbs: set[str] = set()  # held by this process's module-scoped fixtures


def _my_dbs(admin: redis.Redis, redis_base: str) -> list[int]:
    """The dbs this process may use: all but db 0 (the counter's), or its share of them when several
    test processes share the Redis."""
    try:
        config: dict[str | None, str | None] = admin.config_get("databases")  # a sync client: a dict
        databases = int(config.get("databases") or 16)
    except redis.RedisError:
        databases = 16
    dbs = list(range(1, databases))
    worker, workers = xdist_worker(), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker is None or redis_base in _own_servers:
        return dbs
    mine = dbs[worker::workers]
    if not mine:
        raise RuntimeError(f"{workers} test workers share a Redis of {databases} dbs: start fewer (-n) or "
                           "install redis-server so each worker starts its own")
    return mine


def fresh_db_url(redis_base: str) -> str:
    """A db of its own (handed out round-robin through a counter in db 0), flushed before use.

    Nothing from an earlier test runs on it any more (stacks are stopped at teardown, and a db that a
    module-scoped fixture of this process holds is skipped), so the flush never deletes a stream under a
    running subscriber.
    """
    admin = redis.Redis.from_url(redis_base + "/0")
    try:
        dbs = _my_dbs(admin, redis_base)
        key = DB_COUNTER if xdist_worker() is None else f"{DB_COUNTER}:{xdist_worker()}"
        for _ in dbs:
            url = f"{redis_base}/{dbs[int(admin.incr(key)) % len(dbs)]}"
            if url not in _held_dbs:
                break
    finally:
        admin.close()
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


@pytest.fixture
def redis_url(redis_base: str) -> str:
    return fresh_db_url(redis_base)


@pytest.fixture(scope="module")
def module_redis_url(redis_base: str) -> Iterator[str]:
    url = fresh_db_url(redis_base)
    _held_dbs.add(url)
    yield url
    _held_dbs.discard(url)


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    """Settings the module's shared stack starts with: a module overrides this fixture to change them."""
    return {}


@pytest.fixture(scope="module")
def module_stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory,
                 stack_env: dict[str, str]) -> Iterator[Stack]:
    """One running stack shared by a test module (tests use distinct session ids)."""
    data = tmp_path_factory.mktemp("stack-data")
    stack = Stack(redis_url=module_redis_url, data_dir=data, env_overrides=stack_env)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


@pytest.fixture
def stack_factory(redis_url: str, data_dir: Path) -> Iterator[type[Stack] | object]:
    """`stack_factory(**env_overrides)` -> a started Stack of all five services (stopped at teardown)."""
    started: list[Stack] = []

    def make(start: bool = True, **env: str) -> Stack:
        stack = Stack(redis_url=redis_url, data_dir=data_dir, env_overrides=env)
        started.append(stack)
        if start:
            stack.start()
        return stack

    yield make
    for stack in started:
        stack.stop()


@pytest.fixture
def stack(stack_factory) -> Stack:
    return stack_factory()


@pytest.fixture(scope="module")
def api(module_stack: Stack) -> Iterator[httpx.Client]:
    """Alice's HTTP client on the module's shared stack."""
    with httpx.Client(base_url=module_stack.url(), headers=ALICE, timeout=httpx.Timeout(60, read=60)) as client:
        yield client


@pytest.fixture(scope="module")
def r(module_redis_url: str) -> Iterator[redis.Redis]:
    """A plain Redis client on the module's database."""
    client = redis.Redis.from_url(module_redis_url)
    yield client
    client.close()
