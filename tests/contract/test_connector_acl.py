"""A connector runs with a Redis ACL user limited to its own call stream (shared/mcp/connector_acl.py,
docs/architecture.md "Connectors"), against a redis-server of the test's own with the user created
here: the example connector's worker reads, answers and acknowledges its calls under that user, and
the same credential is refused every other key and command (the registry, an inbox, a call record,
another connector's stream)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from redis.exceptions import NoPermissionError

from services.connectors.example.library import BrandLibrary
from services.connectors.example.worker import CallWorker
from shared.contracts.records.connectors import ConnectorCall, ConnectorResultSubmit
from shared.mcp import connectors as rules
from shared.mcp.connector_acl import acl_rules, main, user_name
from shared.redis import keys
from tests.support.polling import eventually
from tests.support.redis_server import start_redis_server

ASSETS = Path(__file__).resolve().parents[2] / "services" / "connectors" / "example" / "assets"
PASSWORD = "brand-only-secret"


@pytest.fixture
async def server() -> AsyncIterator[tuple[aioredis.Redis, aioredis.Redis]]:
    """(the admin client, the connector's client) on a fresh redis-server with the `brand` user."""
    url, proc = start_redis_server()
    admin = aioredis.Redis.from_url(url + "/0")
    await admin.execute_command("ACL", "SETUSER", user_name("brand"), "reset", *acl_rules("brand"), f">{PASSWORD}")
    host_port = url.removeprefix("redis://")
    limited = aioredis.Redis.from_url(f"redis://{user_name('brand')}:{PASSWORD}@{host_port}/0")
    try:
        yield admin, limited
    finally:
        await limited.aclose()
        await admin.aclose()
        proc.terminate()
        proc.wait(timeout=10)


async def test_the_example_connector_works_under_its_own_user(server: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    admin, limited = server
    answers: list[ConnectorResultSubmit] = []

    async def answer(body: ConnectorResultSubmit) -> None:
        answers.append(body)

    worker = CallWorker(limited, "brand", BrandLibrary(ASSETS), answer, "brand-1", 1, CollectorRegistry())
    await worker.ensure_group()
    await worker.ensure_group()  # a restart: the group exists (BUSYGROUP), still allowed
    deadline = int(time.time() * 1000) + 60_000
    for i, role in enumerate(("primary", "accent")):
        await rules.open_call(admin, ConnectorCall(call_id=f"call_{i}", session_id="s1", connector="brand",
                                                   tool="colours", arguments={"role": role}, deadline_ms=deadline))
    task = asyncio.ensure_future(worker.run_forever())  # reads, claims idle entries (XAUTOCLAIM), acks
    try:
        async def both() -> bool:
            return len(answers) == 2

        await eventually(both, timeout=20, what="both calls answered under the limited user")

        async def acked() -> bool:
            return int((await admin.xpending(keys.connector_calls("brand"), keys.CONNECTOR_GROUP))["pending"]) == 0

        await eventually(acked, timeout=20, what="both calls acknowledged")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert sorted(a.call_id for a in answers) == ["call_0", "call_1"] and all(a.status == "ok" for a in answers)


async def test_the_connector_user_is_refused_everything_else(server: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    admin, limited = server
    await admin.hset(keys.CONNECTORS, "brand", "{}")
    await admin.xadd(keys.connector_calls("crm"), {"type": "connector_call", "data": "{}"})
    assert await limited.ping()
    refused = [
        limited.hgetall(keys.CONNECTORS),  # the registry
        limited.hset(keys.CONNECTORS, "brand", "{}"),
        limited.xadd(keys.inbox("s1"), {"type": "injection", "data": "{}"}),  # a session's inbox
        limited.hset(keys.connector_call("s1", "call_0"), "outcome", "forged"),  # a call record
        limited.xrange(keys.connector_calls("crm")),  # another connector's calls
        limited.xgroup_create(keys.connector_calls("crm"), keys.CONNECTOR_GROUP, id="0", mkstream=True),
        limited.xadd(keys.connector_calls("brand"), {"type": "connector_call", "data": "{}"}),  # only the runtime sends
        limited.keys("*"),
        limited.publish("gamma:events", "x"),
    ]
    for command in refused:
        with pytest.raises(NoPermissionError):
            await command


def test_the_acl_command_is_printed_for_an_operator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["brand"]) == 0
    out = capsys.readouterr().out
    assert "ACL SETUSER connector-brand reset on resetkeys ~gamma:connectors:{brand}:* resetchannels -@all" in out
    assert main([]) == 2
    with pytest.raises(ValueError):
        acl_rules("Bad!")
