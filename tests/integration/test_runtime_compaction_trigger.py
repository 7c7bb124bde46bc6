"""The compaction trigger (docs/architecture.md "Compaction"): the threshold counts the whole next request, a failed summary
backs off instead of asking on every model call, and an unanswered request stops blocking after a
bounded time. In-process runtime, real Redis, scripted model; no compaction service runs, so the
requests published on `gamma:compaction:requests` are exactly what the runtime asked for."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from services.runtime.runs.compactor import static_tokens
from shared.contracts.streams.inbox import CompactionReady, UserPrompt
from shared.history.tokens import context_tokens
from shared.redis import keys
from tests.integration.runtime_inproc import InProc, inproc_worker
from tests.integration.runtime_support import call, done, script
from tests.support.polling import eventually

# The base prompt with its tool schemas is about 3,600 tokens; a short conversation a few hundred.
# With this window the messages alone stay under the threshold, the whole request does not.
WINDOW = {"GAMMA_CONTEXT_WINDOW": 4_000, "GAMMA_RESERVE_TOKENS": 1_000, "GAMMA_KEEP_RECENT_TOKENS": 40}


async def requests(inp: InProc, sid: str) -> list[dict[str, Any]]:
    out = []
    for _, fields in await inp.redis.xrange(keys.COMPACTION_REQUESTS):
        payload = json.loads(fields[b"data"])
        if payload["session_id"] == sid:
            out.append(payload)
    return out


async def run(inp: InProc, sid: str, message: str, n_runs: int) -> None:
    await inp.append(UserPrompt(session_id=sid, message=message))

    async def finished() -> bool:
        return not inp.worker.sessions[sid].state.running and len(await inp.events(sid, "agent_end")) >= n_runs
    await eventually(finished, timeout=20, what=f"{sid}: run {n_runs} to finish")


async def ordered(inp: InProc, sid: str) -> list[str]:
    """model_request and compaction phases, in event order."""
    out = []
    for _, fields in await inp.redis.xrange(keys.events(sid)):
        ev = json.loads(fields[b"data"])
        if ev["type"] == "model_request":
            out.append("call")
        elif ev["type"] == "compaction":
            out.append(ev["data"]["phase"])
    return out


# A tool result of about 4,000 tokens: the messages alone pass the threshold (old and new counting).
BIG = {"tool_calls": [call("bash", command="python3 -c \"print('tide ' * 4000)\"")]}


def echo_steps(n: int) -> list[dict[str, Any]]:
    return [{"tool_calls": [call("bash", command=f"echo step {i}")]} for i in range(n)]


async def test_threshold_counts_system_prompt_and_tool_schemas(redis_url: str, data_dir: Path) -> None:
    async with inproc_worker(redis_url, data_dir, **WINDOW) as inp:
        sid = "cthresh1"
        session = await inp.live(sid)
        await run(inp, sid, "hello", 1)
        await run(inp, sid, script(*echo_steps(2), done("ok")), 2)
        messages = context_tokens(session.agent.messages)
        static = static_tokens(session.agent.context.system_prompt, session.agent.context.tools)
        assert messages < 4_000 - 1_000 < messages + static, "the setup puts only the whole request over"
        sent = await requests(inp, sid)
        assert len(sent) == 1, "one request, in flight until answered"
        assert sent[0]["tokens_before"] > static


async def test_failed_summary_backs_off_then_asks_again(redis_url: str, data_dir: Path) -> None:
    async with inproc_worker(redis_url, data_dir, GAMMA_COMPACTION_RETRY_CALLS=3, GAMMA_COMPACTION_RETRY_S=600,
                             **WINDOW) as inp:
        sid = "cback1"
        await inp.live(sid)
        await run(inp, sid, "hello", 1)
        await run(inp, sid, script(BIG, done("ok")), 2)
        (first,) = await requests(inp, sid)
        await inp.append(CompactionReady(session_id=sid, request_id=first["request_id"],
                                         upto_entry_id=first["upto_entry_id"],
                                         first_kept_entry_id=first["first_kept_entry_id"], error="overloaded"))
        await run(inp, sid, script(*echo_steps(5), done("ok")), 3)
        phases = await ordered(inp, sid)
        after_failure = phases[phases.index("stale") + 1:]
        assert after_failure[:4] == ["call", "call", "call", "requested"], phases
        assert len(await requests(inp, sid)) == 2, "asked again once, after the backoff, not on every call"


async def test_unanswered_request_stops_blocking_after_the_timeout(redis_url: str, data_dir: Path) -> None:
    async with inproc_worker(redis_url, data_dir, GAMMA_COMPACTION_TIMEOUT_S=1, **WINDOW) as inp:
        sid = "ctimeout1"
        await inp.live(sid)
        await run(inp, sid, "hello", 1)
        await run(inp, sid, script(BIG, done("ok")), 2)
        assert len(await requests(inp, sid)) == 1
        await run(inp, sid, script(done("still waiting")), 3)
        assert len(await requests(inp, sid)) == 1, "within the timeout the request is still in flight"
        await asyncio.sleep(1.2)
        await run(inp, sid, script(done("later")), 4)
        sent = await requests(inp, sid)
        assert len(sent) == 2 and sent[1]["request_id"] != sent[0]["request_id"]
