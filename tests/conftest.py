"""Shared fixtures: a real Redis (own db per test), a data dir, and the five services as processes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from tests.support.redis_server import base_redis_url
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}

DB_COUNTER = "gamma:test:db-counter"


@pytest.fixture(scope="session")
def redis_base() -> str:
    return base_redis_url()


def fresh_db_url(redis_base: str) -> str:
    """A db of its own (1..15, handed out round-robin through db 0), flushed before use.

    Nothing from an earlier test runs on it any more (stacks are stopped at teardown), so the flush
    never deletes a stream under a running subscriber.
    """
    admin = redis.Redis.from_url(redis_base + "/0")
    db = int(admin.incr(DB_COUNTER)) % 15 + 1
    admin.close()
    url = f"{redis_base}/{db}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


@pytest.fixture
def redis_url(redis_base: str) -> str:
    return fresh_db_url(redis_base)


@pytest.fixture(scope="module")
def module_redis_url(redis_base: str) -> str:
    return fresh_db_url(redis_base)


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
def stack(stack_factory) -> Stack:  # type: ignore[no-untyped-def]
    return stack_factory()  # type: ignore[no-any-return]


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
