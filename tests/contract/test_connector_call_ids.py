"""A call id names one call (shared/mcp/connectors.py `open_call`, services/runtime/connector/connectors.py, against a
real Redis): a second call under a taken id is refused by the record, a re-sent open is not; the
runtime re-keys a tool call id the model reused, so the new call gets its own answer and never the
old outcome, and a wake finds the re-keyed call again (docs/architecture.md "Connectors")."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from services.runtime.connector.connectors import ConnectorHub, rekeyed
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.connectors import ConnectorCall, ConnectorTool
from shared.contracts.records.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.streams.inbox import ConnectorResult
from shared.mcp import connectors as rules
from shared.redis import keys
from shared.streams.inbox import InboxEntry
from tests.support.polling import eventually

TOOL = ConnectorTool(name="find", description="finds", parameters={"type": "object"}, timeout_s=30)


def _call(sid: str, call_id: str, deadline_ms: int) -> ConnectorCall:
    return ConnectorCall(call_id=call_id, session_id=sid, connector="crm", tool="find", arguments={},
                         deadline_ms=deadline_ms)


async def _guard() -> None:
    return None


async def _ack(entry_id: str | None) -> None:
    return None


async def test_a_taken_id_is_refused_and_a_resent_open_is_not(redis_client: aioredis.Redis) -> None:
    sid, deadline = f"s_ids{time.time_ns()}", int(time.time() * 1000) + 60_000
    first = _call(sid, "call_1", deadline)
    await rules.open_call(redis_client, first, turn=100)
    await rules.open_call(redis_client, first, turn=100)  # the same command again (a reset connection's retry)
    assert len(await redis_client.xrange(keys.connector_calls("crm"))) >= 1
    await rules.settle(redis_client, sid, "call_1", '{"status":"ok","content":"old"}')
    before = await redis_client.xlen(keys.connector_calls("crm"))
    with pytest.raises(rules.CallIdTaken):
        await rules.open_call(redis_client, _call(sid, "call_1", deadline + 1), turn=200)
    assert await redis_client.xlen(keys.connector_calls("crm")) == before  # nothing sent
    assert (await rules.read_call(redis_client, sid, "call_1"))["outcome"] == '{"status":"ok","content":"old"}'


async def test_a_reused_tool_call_id_gets_its_own_answer_and_a_wake_finds_it(redis_client: aioredis.Redis,
                                                                             tmp_path: Path) -> None:
    sid = f"s_ids{time.time_ns()}"
    t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(_guard))
    await t.ensure_header()
    await t.append_message(UserMessage(content="go"))
    old = AssistantMessage(content=[ToolCall(id="call_0", name="crm__find")], timestamp=1_000)
    await t.append_message(old)
    hub = ConnectorHub(sid, redis_client, t, _ack)
    await rules.open_call(redis_client, _call(sid, "call_0", int(time.time() * 1000) + 60_000), turn=old.timestamp)
    await rules.settle(redis_client, sid, "call_0", '{"status":"ok","content":"the old answer"}')
    await t.append_message(ToolResultMessage(tool_call_id="call_0", tool_name="crm__find",
                                             content=[TextContent(text="the old answer")]))
    again = AssistantMessage(content=[ToolCall(id="call_0", name="crm__find")], timestamp=2_000)
    await t.append_message(again)  # a provider that numbers its tool call ids per response

    new_id = rekeyed("call_0", again.timestamp)
    running = asyncio.ensure_future(hub.call("crm", TOOL, {}, "call_0"))

    async def sent() -> bool:
        return "connector" in await rules.read_call(redis_client, sid, new_id)

    await eventually(sent, what="the call sent under its re-keyed id")
    assert not running.done()  # the old outcome is not this call's answer

    # A wake of another holder at this point finds the open call under its re-keyed id.
    woken = ConnectorHub(sid, redis_client, Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(_guard)), _ack)
    await woken.resume()
    assert woken.pending == {"call_0"}

    answer = ConnectorResult(session_id=sid, call_id=new_id, connector="crm", status="ok", content="the new answer")
    await rules.settle(redis_client, sid, new_id, json.dumps({"status": "ok", "content": "the new answer"},
                                                            separators=(",", ":")))
    await hub.on_result(InboxEntry(session_id=sid, entry_id="1-0", message=answer), answer)
    outcome = await asyncio.wait_for(running, 10)
    assert outcome.content == "the new answer" and outcome.details["call_id"] == new_id  # type: ignore[index]
