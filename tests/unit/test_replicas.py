"""shared/redis/replicas.py without a cluster: what a primary's ROLE teaches `durable`, and what it does
not (the cluster side: tests/cluster/test_cluster_durable.py)."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ResponseError

from shared.redis import replicas


class FakeConnection:
    host, port = "10.0.0.7", 6379

    def __init__(self, role: Any = None, error: Exception | None = None) -> None:
        self.role, self.error, self.disconnected = role, error, False

    async def send_command(self, *args: Any) -> None:
        if self.error is not None:
            raise self.error

    async def read_response(self) -> Any:
        return self.role

    async def disconnect(self) -> None:
        self.disconnected = True


@pytest.fixture(autouse=True)
def own_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replicas, "_without_replica", {})


async def test_a_primary_listing_no_replica_is_remembered() -> None:
    conn = FakeConnection([b"master", 1234, []])
    await replicas.check_role(conn, 1)  # type: ignore[arg-type]
    assert replicas.known_without("10.0.0.7:6379")


@pytest.mark.parametrize("role", [
    [b"master", 1234, [[b"10.0.0.8", b"6379", b"1234"]]],  # a replica, lagging: WAIT goes on
    [b"slave", b"10.0.0.8", 6379, b"connected", 1234],  # not a primary any more: a failover under way
    None,
])
async def test_a_replica_or_another_role_teaches_nothing(role: Any) -> None:
    await replicas.check_role(FakeConnection(role), 1)  # type: ignore[arg-type]
    assert not replicas.known_without("10.0.0.7:6379")


async def test_a_failed_role_leaves_the_write_standing_and_drops_the_connection() -> None:
    conn = FakeConnection(error=ResponseError("NOPERM this user has no permissions to run the 'role' command"))
    await replicas.check_role(conn, 1)  # type: ignore[arg-type]  # returns: the write it follows stands
    assert conn.disconnected and not replicas.known_without("10.0.0.7:6379")
