"""Contract of `gamma:connectors:{name}:calls` (runtime -> a connector, group `connector`; plain
`XADD {type, data}`) and of the `ConnectorResult` inbox member (notifications -> runtime)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from services.connectors.example.library import BrandLibrary
from services.connectors.example.worker import CallWorker
from shared.contracts.records.connectors import MAX_RESULT_CHARS, ConnectorCall, ConnectorResultSubmit
from shared.contracts.streams.inbox import INBOX_ADAPTER, ConnectorResult
from shared.mcp import connectors as rules
from shared.redis import keys
from tests.support.polling import eventually

ASSETS = Path(__file__).resolve().parents[2] / "services" / "connectors" / "example" / "assets"


DEADLINE = int(time.time() * 1000) + 3_600_000


def calls() -> list[ConnectorCall]:
    deadline = DEADLINE
    return [ConnectorCall(call_id="call_1", session_id="s1", connector="brand", tool="colours",
                          arguments={"role": "accent"}, deadline_ms=deadline),
            ConnectorCall(call_id="call_2", session_id="s2", connector="brand", tool="images",
                          arguments={"query": "logo", "limit": 2}, deadline_ms=deadline)]


async def test_calls_round_trip_with_their_records(redis_client: aioredis.Redis) -> None:
    for c in calls():
        await rules.open_call(redis_client, c)
    got = await redis_client.xrange(keys.connector_calls("brand"))
    assert [ConnectorCall.model_validate_json(f[b"data"]) for _, f in got] == calls()
    assert {f[b"type"] for _, f in got} == {b"connector_call"}
    record = await rules.read_call(redis_client, "s1", "call_1")
    assert record["connector"] == "brand" and record["tool"] == "colours" and "outcome" not in record
    assert await rules.settle(redis_client, "s1", "call_1", rules.TIMED_OUT) == (True, rules.TIMED_OUT)
    assert await rules.settle(redis_client, "s1", "call_1", '{"status":"ok","content":"x"}') == (False, rules.TIMED_OUT)


async def test_the_example_connector_answers_valid_calls_and_acks_invalid_ones(redis_client: aioredis.Redis) -> None:
    answers: list[ConnectorResultSubmit] = []

    async def answer(body: ConnectorResultSubmit) -> None:
        answers.append(body)

    worker = CallWorker(redis_client, "brand", BrandLibrary(ASSETS), answer, "brand-1", 60_000, CollectorRegistry())
    await worker.ensure_group()
    await redis_client.xadd(keys.connector_calls("brand"), {"type": "connector_call", "data": json.dumps({"call_id": "x"})})
    for c in calls():
        await rules.open_call(redis_client, c)
    task = asyncio.ensure_future(worker.run_forever())
    try:
        await eventually(lambda: _len(answers, 2), timeout=20, what="two answers")
        await eventually(lambda: _pending_zero(redis_client), timeout=20, what="every call acked")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert [(a.call_id, a.status) for a in answers] == [("call_1", "ok"), ("call_2", "ok")]
    assert json.loads(answers[0].content)["colours"] == [{"name": "Signal Coral", "hex": "#F97366", "role": "accent"}]


async def _len(items: list[ConnectorResultSubmit], n: int) -> bool:
    return len(items) >= n


async def _pending_zero(client: aioredis.Redis) -> bool:
    info = await client.xpending(keys.connector_calls("brand"), keys.CONNECTOR_GROUP)
    return int(info["pending"]) == 0


def test_a_connector_result_is_a_bounded_inbox_member() -> None:
    m = ConnectorResult(session_id="s1", call_id="call_1", connector="brand", status="ok", content="[]")
    assert INBOX_ADAPTER.validate_json(m.model_dump_json()) == m
    with pytest.raises(ValidationError):
        ConnectorResult(session_id="s1", call_id="call_1", connector="brand", status="ok",
                        content="x" * (MAX_RESULT_CHARS + 1))
    with pytest.raises(ValidationError):
        INBOX_ADAPTER.validate_python({**m.model_dump(), "status": "trusted"})
