"""Fixtures for the tests on a real local Redis Cluster (tests/support/redis_cluster.py).

The modules here run a representative set of the integration flows (imported from tests/integration,
unchanged) against 3 primaries + 3 replicas, plus the cluster's own fault test. A cluster has only
db 0, so instead of a db per test each module (and each test that asks for `redis_url`) starts from
FLUSHALL of every primary, and the tests' own direct Redis clients (`redis.Redis.from_url(url)` in
the imported modules) are cluster clients for the cluster's URL.

GAMMA_TEST_CLUSTER_URL names a running cluster to use instead of starting one (never one the fault
test may kill: that test always starts its own). Without redis-server and redis-cli the tests skip,
except under CI, where .ci/run installs both and a missing cluster is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster
import redis.cluster

from tests.support.needs import missing
from tests.support.redis_cluster import LocalCluster, cluster_tools


class ExistingCluster(LocalCluster):
    """A cluster somebody else runs (GAMMA_TEST_CLUSTER_URL): flushed, never stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(base_port=int(urlparse(url).port or 6379))
        self._given = url
        ports = []
        with redis.cluster.RedisCluster.from_url(url) as client:
            for node in client.get_nodes():
                ports.append(int(node.port))
        self.existing_ports = sorted(ports)

    @property
    def ports(self) -> list[int]:
        return self.existing_ports

    @property
    def url(self) -> str:
        return self._given

    def alive(self) -> list[int]:
        return self.existing_ports

    def stop(self) -> None:
        pass


def start_cluster() -> LocalCluster:
    if cluster_tools() is None:
        missing("redis-server and redis-cli are needed for a local Redis Cluster")
    return LocalCluster().start()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    given = os.environ.get("GAMMA_TEST_CLUSTER_URL")
    cluster = ExistingCluster(given) if given else start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


def _is_cluster_url(cluster: LocalCluster, url: str) -> bool:
    parsed = urlparse(url)
    return parsed.hostname in ("127.0.0.1", "localhost") and parsed.port in cluster.ports


@pytest.fixture(scope="module", autouse=True)
def cluster_clients(redis_cluster: LocalCluster) -> Iterator[None]:
    """`redis.Redis.from_url(<the cluster's url>)` in the imported tests: a cluster client."""
    patch = pytest.MonkeyPatch()
    sync_from_url, async_from_url = redis.Redis.from_url, aioredis.Redis.from_url

    def sync_client(url: str, **options: Any) -> Any:
        if _is_cluster_url(redis_cluster, url):
            return redis.cluster.RedisCluster.from_url(url.rsplit("/", 1)[0] if url.endswith("/0") else url, **options)
        return sync_from_url(url, **options)

    def async_client(url: str, **options: Any) -> Any:
        if _is_cluster_url(redis_cluster, url):
            return redis.asyncio.cluster.RedisCluster.from_url(url.rsplit("/", 1)[0] if url.endswith("/0") else url,
                                                               **options)
        return async_from_url(url, **options)

    patch.setattr(redis.Redis, "from_url", staticmethod(sync_client))
    patch.setattr(redis, "from_url", sync_client)
    patch.setattr(aioredis.Redis, "from_url", staticmethod(async_client))
    patch.setattr(aioredis, "from_url", async_client)
    try:
        yield
    finally:
        patch.undo()


@pytest.fixture(scope="session")
def redis_base(redis_cluster: LocalCluster) -> str:
    return redis_cluster.url.rsplit("/", 1)[0]


@pytest.fixture(scope="module")
def module_redis_url(redis_cluster: LocalCluster) -> str:
    redis_cluster.flushall()
    return redis_cluster.url


@pytest.fixture
def redis_url(redis_cluster: LocalCluster) -> str:
    redis_cluster.flushall()
    return redis_cluster.url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The imported tests run in their source order (the tests of one module may build on each
    other's sessions), not in the alphabetical order of the import lists."""
    def source_order(item: pytest.Item) -> tuple[str, int]:
        function = getattr(item, "function", None)
        code = getattr(function, "__code__", None)
        if "tests/cluster/" not in str(item.path) or code is None:
            return ("", 0)
        return (str(item.path), code.co_firstlineno)

    cluster_items = [i for i in items if "tests/cluster/" in str(i.path)]
    ordered = iter(sorted(cluster_items, key=source_order))
    items[:] = [next(ordered) if "tests/cluster/" in str(i.path) else i for i in items]
