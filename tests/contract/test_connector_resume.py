"""A takeover's connector calls (services/runtime/connector/connectors.py `resume` / `await_pending`, against a
real Redis): a settled one is answered at the wake, an open one is left to the run task and is never
repaired as interrupted; the run task takes the answer from the inbox, or settles the call timed out
at its deadline, and appends each result once (docs/architecture.md "Connectors")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import redis.asyncio as aioredis

from services.runtime.connector.connectors import ConnectorHub
from services.runtime.runs.supervisor import INTERRUPTED, repair_interrupted_run
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.connectors import ConnectorCall
from shared.contracts.records.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from shared.contracts.streams.inbox import ConnectorResult
from shared.mcp import connectors as rules
from shared.streams.inbox import InboxEntry
from tests.support.polling import eventually


async def _guard() -> None:
    return None


async def _sent(client: aioredis.Redis, sid: str, call_id: str, deadline_ms: int) -> None:
    await rules.open_call(client, ConnectorCall(call_id=call_id, session_id=sid, connector="crm", tool="find",
                                                arguments={}, deadline_ms=deadline_ms))


def _results(t: Transcript) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in t.context():
        if isinstance(m, ToolResultMessage):
            out.setdefault(m.tool_call_id, []).append(m.content[0].text)
    return out


async def test_open_calls_wait_for_the_run_task_and_are_answered_once(redis_client: aioredis.Redis,
                                                                      tmp_path: Path) -> None:
    sid = f"s_resume{time.time_ns()}"
    now = int(time.time() * 1000)
    await _sent(redis_client, sid, "c_settled", now + 60_000)
    await rules.settle(redis_client, sid, "c_settled", '{"status":"ok","content":"early"}')
    await _sent(redis_client, sid, "c_expired", now - 1)  # its deadline passed while no one held the session
    await _sent(redis_client, sid, "c_open", now + 60_000)
    t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(_guard))
    await t.ensure_header()
    await t.append_message(UserMessage(content="go"))
    await t.append_message(AssistantMessage(content=[ToolCall(id=i, name=n) for i, n in (
        ("c_settled", "crm__find"), ("c_expired", "crm__find"), ("c_open", "crm__find"), ("c_bash", "bash"))]))
    acked: list[str | None] = []

    async def ack(entry_id: str | None) -> None:
        acked.append(entry_id)

    hub = ConnectorHub(sid, redis_client, t, ack)
    await hub.resume()
    assert hub.pending == {"c_expired", "c_open"} and _results(t) == {"c_settled": ["early"]}
    await repair_interrupted_run(t, pending=hub.pending)
    assert set(_results(t)) == {"c_settled", "c_bash"} and _results(t)["c_bash"] == [INTERRUPTED]

    waiting = asyncio.ensure_future(hub.await_pending())
    async def expired_answered() -> bool:
        return "c_expired" in _results(t)

    await eventually(expired_answered, what="the expired call settled at its deadline")
    assert not waiting.done() and "c_open" not in _results(t)
    answer = ConnectorResult(session_id=sid, call_id="c_open", connector="crm", status="ok", content="late")
    await hub.on_result(InboxEntry(session_id=sid, entry_id="1-0", message=answer), answer)
    assert await asyncio.wait_for(waiting, 10) is True
    await hub.on_result(InboxEntry(session_id=sid, entry_id="2-0", message=answer), answer)  # a repeat: dropped
    results = _results(t)
    assert results["c_open"] == ["late"] and len(results["c_expired"]) == 1 and "timed out" in results["c_expired"][0]
    assert (await rules.read_call(redis_client, sid, "c_expired"))["outcome"] == rules.TIMED_OUT
    assert acked == ["1-0", "2-0"] and hub.pending == frozenset() and not await hub.await_pending()


async def test_a_cancelled_wait_leaves_the_call_to_the_next_holder(redis_client: aioredis.Redis,
                                                                   tmp_path: Path) -> None:
    sid = f"s_resume{time.time_ns()}"
    await _sent(redis_client, sid, "c_open", int(time.time() * 1000) + 60_000)
    t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(_guard))
    await t.ensure_header()
    await t.append_message(UserMessage(content="go"))
    await t.append_message(AssistantMessage(content=[ToolCall(id="c_open", name="crm__find")]))

    async def ack(entry_id: str | None) -> None:
        return None

    hub = ConnectorHub(sid, redis_client, t, ack)
    await hub.resume()
    waiting = asyncio.ensure_future(hub.await_pending())
    await asyncio.sleep(0)
    waiting.cancel()  # the session closed: the cancel goes through, nothing is appended
    await asyncio.wait({waiting})
    assert waiting.cancelled() and hub.pending == frozenset() and _results(t) == {}
    await rules.settle(redis_client, sid, "c_open", '{"status":"ok","content":"meanwhile"}')
    again = ConnectorHub(sid, redis_client, Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(_guard)), ack)
    await again.resume()  # the next holder: the record answers
    assert _results(again.transcript) == {"c_open": ["meanwhile"]} and again.pending == frozenset()
