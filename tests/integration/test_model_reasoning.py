"""Reasoning carried across turns with the Responses API, stateless (README "Models"): every reasoning item
from `response.output_item.done` is kept with its assistant message and replayed verbatim on later
requests to the same model; dropped after a model switch (the scripted server, like OpenAI, refuses
encrypted content another model made); kept across a wake and a compaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.runtime.engine.types import AgentContext
from services.runtime.model.model_api import ModelSettings
from services.runtime.model.responses_api import ResponsesApi
from shared.contracts.records.transcript import CompactionEntry, parse_entries
from shared.history.context import build_context
from tests.integration.runtime_inproc import inproc_worker
from tests.integration.runtime_support import call, done, script
from tests.support.model_runs import assistant_entries, bodies, create_row, prompt_and_wait, transcript

pytestmark = pytest.mark.timeout(90)


def reasoning_in(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body["input"] if i.get("type") == "reasoning"]


def recorded_items(data_dir: Path, sid: str) -> list[dict[str, Any]]:
    return [c["item"] for m in assistant_entries(data_dir, sid) for c in m["content"]
            if c["type"] == "thinking" and c.get("item")]


async def test_reasoning_replayed_verbatim_kept_across_a_wake_dropped_after_a_model_switch(
        redis_url: str, tmp_path: Path) -> None:
    sid = "reasoning1"
    steps = [{"tool_calls": [call("read", path=f"f{i}.txt")], "reasoning": f"I should read f{i}."} for i in range(3)]
    async with inproc_worker(redis_url, tmp_path) as proc:
        await create_row(proc, sid, "responses", effort="medium", name="gpt-5-mini")
        await proc.live(sid)
        await prompt_and_wait(proc, sid, script(*steps, done("read")))
        sent = bodies(proc, "responses")
        items = recorded_items(tmp_path, sid)
        assert len(items) == len(sent) == 4 and all(i["encrypted_content"].startswith("gAAAA") for i in items)
        assert [i["summary"][0]["text"] for i in items[:3]] == [f"I should read f{i}." for i in range(3)]
        for n, body in enumerate(sent):  # request n carries the n items before it, verbatim and in order
            assert reasoning_in(body) == items[:n]
            assert body["include"] == ["reasoning.encrypted_content"] and body["store"] is False
        # Each reasoning item sits right before the function call it led to.
        inputs = sent[-1]["input"]
        for item in items[:3]:
            at = inputs.index(item)
            assert inputs[at + 1]["type"] == "function_call"
    async with inproc_worker(redis_url, tmp_path) as proc:  # a new wake: the transcript is all there is
        await proc.live(sid)
        answer = await prompt_and_wait(proc, sid, script(done("after the wake")))
        assert answer["message_user"]["message"] == "after the wake" and not answer["errors"]
        assert reasoning_in(bodies(proc, "responses")[0]) == items
    async with inproc_worker(redis_url, tmp_path) as proc:
        await create_row(proc, sid, "responses", effort="medium", name="gpt-5")  # the user switched models
        await proc.live(sid)
        answer = await prompt_and_wait(proc, sid, script(done("on the new model")))
        assert answer["message_user"]["message"] == "on the new model" and not answer["errors"]
        first, *rest = bodies(proc, "responses")
        assert first["model"] == "gpt-5" and reasoning_in(first) == []
        # The function calls and outputs stay: only the other model's reasoning is left out.
        assert sum(1 for i in first["input"] if i.get("type") == "function_call" and i["name"] == "read") == 3


async def test_a_replayed_foreign_reasoning_item_is_refused_by_the_scripted_server(
        redis_url: str, tmp_path: Path) -> None:
    """The check the switch test relies on: the scripted server does refuse another model's item."""
    from scripted import responses as scripted_responses

    body = {"model": "gpt-5", "input": [{"type": "reasoning", "id": "rs_1", "summary": [],
                                         "encrypted_content": scripted_responses.encrypt("gpt-5-mini", "x")}]}
    assert scripted_responses.foreign_reasoning(body) == "rs_1"
    body["model"] = "gpt-5-mini"
    assert scripted_responses.foreign_reasoning(body) is None


async def test_reasoning_survives_a_compaction(redis_url: str, tmp_path: Path) -> None:
    """After a compaction the kept assistant messages still carry their reasoning, replayed in place
    behind the summary; the summarized ones are gone with their messages (no dangling item)."""
    sid = "reasoning2"
    steps = [{"tool_calls": [call("read", path=f"f{i}.txt")], "reasoning": f"step {i}"} for i in range(4)]
    async with inproc_worker(redis_url, tmp_path) as proc:
        await create_row(proc, sid, "responses", effort="low", name="gpt-5-mini")
        await proc.live(sid)
        await prompt_and_wait(proc, sid, script(*steps, done("read")))
    raw = transcript(tmp_path, sid)
    assistants = [e for e in raw if e["type"] == "message" and e["message"]["role"] == "assistant"]
    keep_from = assistants[2]["id"]  # a valid cut point: an assistant message, never a tool result
    compaction = CompactionEntry(id="c0mpact1", parent_id=raw[-1]["id"], timestamp="2026-12-04T00:00:00.000Z",
                                 summary="## Goal\nread files", first_kept_entry_id=keep_from)
    entries = [*parse_entries(raw), compaction]
    context = build_context(entries)
    body = ResponsesApi().body(AgentContext("sys", context, []),
                               ModelSettings(model="gpt-5-mini", api="responses", reasoning_effort="low"))
    kept = [c["item"] for e in assistants[2:] for c in e["message"]["content"] if c["type"] == "thinking"]
    assert reasoning_in(body) == kept and len(kept) == 3
    assert body["input"][0]["content"].startswith("The conversation history before this point was compacted")
    for item in kept:
        nxt = body["input"][body["input"].index(item) + 1]
        assert nxt["type"] in ("function_call", "message")
