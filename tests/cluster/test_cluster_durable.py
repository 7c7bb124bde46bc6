"""`durable` on a cluster (shared/redis/redis_cluster.py): a write a replica confirmed within the WAIT
budget is not counted; one no replica confirmed is counted, logged with its key and exported on
/metrics, because it is the only kind of acknowledged write a failover can lose (the fault test's
audit, tests/cluster/test_cluster_faults.py, excuses nothing else)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest

from shared.redis import redis_cluster as rc
from shared.redis import replicas
from shared.redis.reconnect import connect
from shared.telemetry.metrics import StreamStats
from tests.support.redis_cluster import LocalCluster


async def test_a_confirmed_write_is_not_counted(redis_url: str, redis_cluster: LocalCluster) -> None:
    redis_cluster.wait_replicas_synced()  # a replica still syncing confirms nothing
    client = connect(redis_url)
    try:
        before = replicas.Unconfirmed.count
        key = f"durable-{uuid.uuid4().hex[:8]}"
        assert await rc.durable(client, key, "SET", key, "1") in (b"OK", "OK", True)
        assert replicas.Unconfirmed.count == before
    finally:
        await client.aclose()


async def test_a_write_no_replica_confirmed_is_counted_logged_and_exported(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each primary has one replica: asking WAIT for two can never be met, and ROLE lists fewer than two,
    # so the primary is then taken for one without a replica (the memo is this test's own).
    monkeypatch.setattr(rc, "WAIT_REPLICAS", 2)
    monkeypatch.setattr(replicas, "_without_replica", {})
    monkeypatch.setenv("GAMMA_REDIS_WAIT_MS", "300")
    client = connect(redis_url)
    registry = CollectorRegistry()
    registry.register(StreamStats(client, "notifications", streams=[], registry=registry))
    try:
        before = replicas.Unconfirmed.count
        key = f"durable-{uuid.uuid4().hex[:8]}"
        with structlog.testing.capture_logs() as logs:
            started = time.monotonic()
            await rc.durable(client, key, "SET", key, "1")
            first_s, started = time.monotonic() - started, time.monotonic()
            await rc.durable(client, key, "SET", key, "2")
            second_s = time.monotonic() - started
        assert await client.get(key) in (b"2", "2")  # WAIT is not a rollback: the writes stand
        assert replicas.Unconfirmed.count == before + 2
        lines = [(e["key"], e["replicas"], e["wait_ms"]) for e in logs if e["event"] == "redis_write_unconfirmed"]
        assert lines == [(key, 1, 300), (key, 0, 0)]  # the second skipped WAIT
        assert [e["event"] for e in logs].count("redis_primary_without_replica") == 1
        assert first_s >= 0.3 > second_s
        exported = generate_latest(registry).decode()
        assert f"gamma_redis_writes_unconfirmed_total {float(before + 2)}" in exported
    finally:
        await client.aclose()


async def test_a_primary_without_replica_is_asked_again_after_the_memo(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replicas, "_without_replica", {})
    monkeypatch.setattr(replicas, "NO_REPLICA_S", 0.05)
    client = connect(redis_url)
    try:
        key = f"durable-{uuid.uuid4().hex[:8]}"
        monkeypatch.setattr(rc, "WAIT_REPLICAS", 2)
        await rc.durable(client, key, "SET", key, "1")
        assert len(replicas._without_replica) == 1
        monkeypatch.setattr(rc, "WAIT_REPLICAS", 1)  # as if a replica came back
        await asyncio.sleep(0.1)
        before = replicas.Unconfirmed.count
        await rc.durable(client, key, "SET", key, "2")
        assert replicas.Unconfirmed.count == before and replicas._without_replica == {}
    finally:
        await client.aclose()
