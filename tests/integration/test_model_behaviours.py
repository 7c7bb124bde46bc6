"""What real models do, through a real runtime session over both APIs (README "Models"): plain text that
ends the run, output cut at the token limit, refusals, 429/5xx with Retry-After, a dropped stream,
broken tool calls; and the prompt cache share growing across a session's turns."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.runtime_inproc import InProc, inproc_worker
from tests.integration.runtime_support import call, done, script
from tests.support.model_runs import FAST_RETRIES, assistant_entries, create_row, prompt_and_wait, transcript

pytestmark = [pytest.mark.timeout(90), pytest.mark.parametrize("api", ["responses", "chat"])]


@asynccontextmanager
async def session(api: str, redis_url: str, tmp_path: Path, **env: object) -> AsyncIterator[tuple[InProc, str]]:
    async with inproc_worker(redis_url, tmp_path, **{**FAST_RETRIES, **env}) as proc:
        sid = f"real-{api}"
        await create_row(proc, sid, api)
        await proc.live(sid)
        yield proc, sid


async def test_plain_text_ends_the_run_as_an_implicit_blocking_message(api: str, redis_url: str,
                                                                       tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script({"content": "Here is the answer: 42."}))
        user = answer["message_user"]
        assert user == {"message": "Here is the answer: 42.", "block_on_user": True, "tool_call_id": "",
                        "implicit": True, "refusal": False}
        last = assistant_entries(tmp_path, sid)[-1]
        assert last["implicitMessageUser"] is True and last["stopReason"] == "stop"


async def test_output_limit_continues_once_then_errors(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script(
            {"content": "The first half", "finish_reason": "length"}, {"content": "and the rest."}))
        # The user reads the whole answer: the cut part and its continuation.
        assert answer["message_user"]["message"] == "The first halfand the rest." and not answer["errors"]
        guidance = [e for e in transcript(tmp_path, sid) if e.get("customType") == "gamma.system_guidance"]
        assert len(guidance) == 1 and "output token limit" in guidance[0]["content"]
        answer = await prompt_and_wait(proc, sid, script(
            {"content": "cut", "finish_reason": "length"}, {"content": "cut again", "finish_reason": "length"}))
        assert "output token limit twice" in answer["errors"][-1]["error"]
        assert assistant_entries(tmp_path, sid)[-1]["stopReason"] == "error"


async def test_refusal_is_shown_as_such(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script({"refusal": "I can't help with that."}))
        user = answer["message_user"]
        assert user["refusal"] is True and user["implicit"] is True
        assert user["message"] == "The model refused: I can't help with that."
        assert assistant_entries(tmp_path, sid)[-1]["refusal"] == "I can't help with that."


async def test_rate_limit_is_retried_after_retry_after(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        started = time.monotonic()
        answer = await prompt_and_wait(proc, sid, script(
            {"error": {"status": 429, "code": "rate_limit_exceeded", "message": "slow down", "retry_after": 0.4},
             "times": 1}, {"content": "made it"}))
        assert time.monotonic() - started >= 0.4  # Retry-After honoured (the base backoff is 0.05 s)
        assert answer["message_user"]["message"] == "made it" and not answer["errors"]
        requests = await proc.events(sid, "model_request")
        assert requests[-1]["attempts"] == 2


async def test_server_errors_exhaust_retries_then_a_clear_error(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script(
            {"error": {"status": 503, "code": "server_error", "message": "overloaded"}}))
        error = answer["errors"][-1]
        assert error["source"] == "model" and "503" in error["error"] and "after 3 attempts" in error["error"]
        assert (await proc.events(sid, "model_request"))[-1]["attempts"] == 3
        last = assistant_entries(tmp_path, sid)[-1]
        assert last["stopReason"] == "error" and last["content"] == []
        # The run ended cleanly: the session takes the next prompt.
        answer = await prompt_and_wait(proc, sid, script(done("back")))
        assert answer["message_user"]["message"] == "back"


async def test_a_stream_cut_leaves_no_half_message(api: str, redis_url: str, tmp_path: Path) -> None:
    text = "A long answer that streams in several deltas. " * 6
    async with session(api, redis_url, tmp_path) as (proc, sid):  # retried: one whole message
        answer = await prompt_and_wait(proc, sid, script({"content": text, "cut": True}))
        assert answer["message_user"]["message"] == text
        texts = ["".join(c["text"] for c in m["content"] if c["type"] == "text")
                 for m in assistant_entries(tmp_path, sid)]
        assert texts == [text]
        assert any(u.get("restart") for u in await proc.events(sid, "message_update"))
    async with session(api, redis_url, tmp_path / "noretry", GAMMA_MODEL_MAX_RETRIES=0) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script({"content": text, "cut": True}))
        assert "RemoteProtocolError" in answer["errors"][-1]["error"]
        last = assistant_entries(tmp_path / "noretry", sid)[-1]
        assert last["stopReason"] == "error" and last["content"] == []


async def test_invalid_json_and_unknown_tools_are_error_results(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        bad = {"name": "todo", "raw_arguments": '{"items": ['}
        await prompt_and_wait(proc, sid, script({"tool_calls": [bad, call("no_such_tool")]}, done("ok")))
        results = [e["message"] for e in transcript(tmp_path, sid)
                   if e["type"] == "message" and e["message"]["role"] == "toolResult"]
        assert [r["isError"] for r in results[:2]] == [True, True]
        assert "Invalid JSON" in results[0]["content"][0]["text"]
        assert "not found" in results[1]["content"][0]["text"]


async def test_cached_share_grows_across_turns(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        steps: list[dict[str, Any]] = [{"tool_calls": [call("read", path=f"f{i}.txt")]} for i in range(4)]
        await prompt_and_wait(proc, sid, script(*steps, done("read them")))
        await prompt_and_wait(proc, sid, script(done("again")))
        requests = await proc.events(sid, "model_request")
        assert requests[0]["cached_tokens"] == 0 and all(r["api"] == api for r in requests)
        assert all(r["cached_tokens"] % 128 == 0 and r["cached_tokens"] <= r["input_tokens"] for r in requests)
        cached = [r["cached_tokens"] for r in requests]
        assert cached == sorted(cached) and cached[-1] > cached[1] > 1024  # each turn reuses more
        # The session's share (what GET /sessions/{id} reports) grows with every turn.
        share = [sum(cached[: i + 1]) / sum(r["input_tokens"] for r in requests[: i + 1]) for i in range(len(cached))]
        assert share == sorted(share) and share[-1] > 0.7


async def test_an_error_inside_the_stream_is_retried_when_transient(api: str, redis_url: str, tmp_path: Path) -> None:
    async with session(api, redis_url, tmp_path) as (proc, sid):
        answer = await prompt_and_wait(proc, sid, script(
            {"content": "fine now", "stream_error": {"code": "server_error", "message": "try again"}, "times": 1}))
        assert answer["message_user"]["message"] == "fine now" and not answer["errors"]
        assert (await proc.events(sid, "model_request"))[-1]["attempts"] == 2
        answer = await prompt_and_wait(proc, sid, script({"content": "failed once", "times": 1, "stream_error": {
            "code": "server_error", "message": "try again", "event": "failed"}}))  # response.failed (Responses)
        assert answer["message_user"]["message"] == "failed once" and not answer["errors"]
        answer = await prompt_and_wait(proc, sid, script(
            {"content": "never", "stream_error": {"code": "invalid_prompt", "message": "flagged"}}))
        assert "flagged" in answer["errors"][-1]["error"]  # not transient: no retry
        assert (await proc.events(sid, "model_request"))[-1]["attempts"] == 1
