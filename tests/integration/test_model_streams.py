"""Streams and finish reasons through a real runtime session over both APIs (README "Models"; reference
§3): tool calls cut at the output limit are not run and the model is told, a run's budget ends it with a
clear error, reasoning summaries and tool-call argument progress stream to the client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.runtime_support import call, done, script
from tests.integration.test_model_behaviours import session
from tests.support.model_runs import assistant_entries, bodies, prompt_and_wait, transcript

pytestmark = [pytest.mark.timeout(90), pytest.mark.parametrize("api", ["responses", "chat"])]


def tool_results(data_dir: Path, sid: str) -> list[dict[str, Any]]:
    return [e["message"] for e in transcript(data_dir, sid)
            if e["type"] == "message" and e["message"]["role"] == "toolResult"]


async def test_a_tool_call_cut_at_the_output_limit_is_not_run_and_the_model_is_told(
        api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        cut = {"name": "write", "raw_arguments": '{"path": "cut.txt", "content": "half of it'}
        answer = await prompt_and_wait(proc, sid, script(
            {"tool_calls": [cut], "finish_reason": "length"},
            {"tool_calls": [call("write", path="small.txt", content="smaller")]}, done("written smaller")))
        assert answer["message_user"]["message"] == "written smaller" and not answer["errors"]
        results = tool_results(tmp_path, sid)
        assert results[0]["isError"] and "output token limit" in results[0]["content"][0]["text"]
        assert "not run" in results[0]["content"][0]["text"] and "Invalid JSON" not in results[0]["content"][0]["text"]
        workspace = tmp_path / "sessions" / sid / "workspace"
        assert not (workspace / "cut.txt").exists() and (workspace / "small.txt").read_text() == "smaller"
        # The model read its call was cut, as the result of that call; no "continue" guidance besides.
        assert not [e for e in transcript(tmp_path, sid) if e.get("customType") == "gamma.system_guidance"]


async def test_the_run_budget_ends_a_loop_with_a_clear_error(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path, GAMMA_RUN_MAX_MODEL_CALLS=3) as (proc, sid):
        steps = [{"tool_calls": [call("read", path=f"f{i}.txt")]} for i in range(6)]
        answer = await prompt_and_wait(proc, sid, script(*steps, done("never")))
        error = answer["errors"][-1]
        assert error["source"] == "run" and error["reason"] == "budget" and "3 model calls" in error["error"]
        assert len(await proc.events(sid, "model_request")) == 3
        entries = assistant_entries(tmp_path, sid)
        assert entries[-1]["stopReason"] == "error" and entries[-1]["errorKind"] == "budget"
        assert len(tool_results(tmp_path, sid)) == 3  # every call made had its tool run: nothing lost
        answer = await prompt_and_wait(proc, sid, script(done("a new run, a new budget")))
        assert answer["message_user"]["message"] == "a new run, a new budget"


async def test_reasoning_summaries_stream_to_the_client(api: str, redis_url: str, tmp_path: Path) -> None:
    if api == "chat":
        pytest.skip("Chat Completions has no reasoning summaries (reference §1.12)")
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script({"content": "The answer.", "summary": "Think it over."}))
        assert answer["message_user"]["message"] == "The answer."
        # The double streams summaries only when the request asks for them (reference §1.12).
        assert bodies(proc, "responses")[0]["reasoning"]["summary"] == "auto"
        updates = await proc.events(sid, "reasoning_update")
        assert "".join(str(u["delta"]) for u in updates) == "Think it over." and updates[0]["item_id"]
        thinking = [c for m in assistant_entries(tmp_path, sid) for c in m["content"] if c["type"] == "thinking"]
        assert [c["thinking"] for c in thinking] == ["Think it over."]


async def test_a_large_tool_call_shows_its_argument_progress(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        content = "line of a large file\n" * 500  # ~10 KB of arguments
        await prompt_and_wait(proc, sid, script({"tool_calls": [call("write", path="big.txt", content=content)]},
                                                done("written")))
        progress = await proc.events(sid, "tool_call_progress")
        assert progress and {p["tool_name"] for p in progress} == {"write"}
        sizes = [int(str(p["bytes"])) for p in progress]
        assert sizes == sorted(sizes) and sizes[-1] >= 8 * 1024
        assert (tmp_path / "sessions" / sid / "workspace" / "big.txt").read_text() == content


async def test_a_stream_without_its_terminal_event_is_retried_then_a_visible_error(
        api: str, redis_url: str, tmp_path: Path) -> None:
    """The double ends the body cleanly but without `response.completed` (Chat: no finish_reason, no
    [DONE]) on every attempt: retried like a cut stream, then an error; never an answer."""
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script({"content": "An answer that never ends.", "no_terminal": True}))
        assert answer["message_user"] is None
        error = answer["errors"][-1]
        assert error["source"] == "model" and "stream closed before" in error["error"]
        assert (await proc.events(sid, "model_request"))[-1]["attempts"] == 3  # FAST_RETRIES: 2 retries
        assert any(u.get("restart") for u in await proc.events(sid, "message_update"))
        last = assistant_entries(tmp_path, sid)[-1]
        assert last["stopReason"] == "error" and last["content"] == []
        answer = await prompt_and_wait(proc, sid, script(done("whole this time")))
        assert answer["message_user"]["message"] == "whole this time"


async def test_content_filter_is_told_to_the_user_never_to_the_model_as_a_token_limit(
        api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script(
            {"content": "The start of a reply", "finish_reason": "content_filter"}, done("never reached")))
        error = answer["errors"][-1]
        assert error["reason"] == "content_filter" and "content filter" in error["error"]
        assert "output token limit" not in error["error"] and answer["message_user"] is None
        assert not [e for e in transcript(tmp_path, sid) if e.get("customType") == "gamma.system_guidance"]
        last = assistant_entries(tmp_path, sid)[-1]
        assert last["stopReason"] == "contentFilter"
        assert len(await proc.events(sid, "model_request")) == 1  # the run ended there
        answer = await prompt_and_wait(proc, sid, script(done("rephrased")))
        assert answer["message_user"]["message"] == "rephrased"


async def test_an_empty_reply_gets_one_nudge_then_a_visible_error(api: str, redis_url: str, tmp_path: Path) -> None:
    """gpt-5-mini reasons at its default effort: an `empty` step is a reasoning-only reply, whose
    reasoning item the double refuses to see replayed alone (reference §1.6)."""
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script({"empty": True, "times": 1}, done("after the nudge")))
        assert answer["message_user"] is not None, answer["errors"]
        assert answer["message_user"]["message"] == "after the nudge" and not answer["errors"]
        nudges = [e for e in transcript(tmp_path, sid) if e.get("customType") == "gamma.system_guidance"]
        assert len(nudges) == 1 and nudges[0]["details"]["reason"] == "empty_reply"
        answer = await prompt_and_wait(proc, sid, script({"empty": True}, done("never")))
        error = answer["errors"][-1]
        assert error["reason"] == "empty_reply" and "no text and no tool call" in error["error"]
        assert assistant_entries(tmp_path, sid)[-1]["errorKind"] == "empty_reply"
