"""The model APIs against the `openai` package's own types (README "Models"), so neither the runtime's
requests nor the scripted model can drift from the real API:
- every request body a real runtime session sends (a multi-turn tool-using deck run, reasoning on)
  validates exactly against ResponseCreateParamsStreaming / CompletionCreateParamsStreaming, and the
  compaction summarizer's against CompletionCreateParamsNonStreaming;
- every event and chunk the scripted model streams parses into the SDK's event / chunk models."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from openai.types.responses import ResponseStreamEvent
from openai.types.responses.response_create_params import (
    ResponseCreateParamsNonStreaming,
    ResponseCreateParamsStreaming,
)
from pydantic import BaseModel, TypeAdapter

from scripted import responses as scripted_responses
from scripted.gamma import ScriptedGamma
from scripted.transport import ScriptedTransport, scripted_client, scripted_transport
from scripted.types import ScriptedReply, ScriptedToolCall
from services.compaction.summarizer import Summarizer
from services.runtime.turns.cache_key import prompt_cache_key
from tests.integration.runtime_inproc import inproc_worker
from tests.support.model_runs import bodies, create_row, prompt_and_wait

RESPONSES = TypeAdapter(ResponseCreateParamsStreaming)
CHAT = TypeAdapter(CompletionCreateParamsStreaming)
CHAT_PLAIN = TypeAdapter(CompletionCreateParamsNonStreaming)
RESPONSES_PLAIN = TypeAdapter(ResponseCreateParamsNonStreaming)
EVENT_CLASSES: dict[str, type[BaseModel]] = {
    typing.get_args(c.model_fields["type"].annotation)[0]: c
    for c in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}


def assert_exact(adapter: TypeAdapter[Any], body: dict[str, Any]) -> None:
    """Valid, and nothing dropped: pydantic ignores keys a TypedDict does not declare, so a key the
    API does not know (at any depth) shows up as a difference."""
    assert _materialize(adapter.validate_python(body)) == body


def _materialize(value: Any) -> Any:
    """`Iterable[...]` params validate lazily (a ValidatorIterator): consuming it validates the items."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    return [_materialize(v) for v in value]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_runtime_requests_validate_against_the_sdk_params(api: str, redis_url: str, tmp_path: Path) -> None:
    async with inproc_worker(redis_url, tmp_path) as proc:
        sid = f"contract-{api}"
        await create_row(proc, sid, api)
        await proc.live(sid)
        answer = await prompt_and_wait(proc, sid, "Create a presentation about tides")
        assert answer["message_user"] and "ready" in answer["message_user"]["message"]
        await prompt_and_wait(proc, sid, "thanks")
        sent = bodies(proc, api)
        assert len(sent) >= 8  # the deck run's turns plus the follow-up
        for body in sent:
            assert_exact(RESPONSES if api == "responses" else CHAT, body)
        last = sent[-1]
        key = prompt_cache_key("shared", 16, sid, "base")  # docs/cache.md: one of the variant's shard keys
        if api == "responses":
            assert last["store"] is False and last["include"] == ["reasoning.encrypted_content"]
            assert last["prompt_cache_key"] == key and last["parallel_tool_calls"] is True
            assert last["reasoning"] == {"effort": "low", "summary": "auto"} and last["max_output_tokens"] > 0
            assert "previous_response_id" not in last and "messages" not in last
            kinds = {i.get("type") for i in last["input"]}
            assert {"message", "function_call", "function_call_output", "reasoning"} <= kinds
            assert all("function" not in t and t["type"] == "function" for t in last["tools"])
        else:
            assert last["reasoning_effort"] == "low" and last["tools"][0]["type"] == "function"
            assert last["prompt_cache_key"] == key  # offline plays OpenAI; other servers do not get it
        # The tools are sent in one fixed order on every request.
        names = [[t.get("name") or t["function"]["name"] for t in b["tools"]] for b in sent]
        assert all(n == names[0] for n in names)


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_compaction_summarizer_request_validates(api: Literal["responses", "chat"]) -> None:
    client = scripted_client(lambda body: ScriptedReply(content="## Goal\nx"))
    summarizer = Summarizer(client, "gpt-5-mini", api)
    assert await summarizer.complete("summarize this", 1000) == "## Goal\nx"
    transport = scripted_transport(client)
    assert transport is not None
    ((sent_api, body),) = transport.requests
    assert sent_api == api
    assert_exact(RESPONSES_PLAIN if api == "responses" else CHAT_PLAIN, body)
    if api == "responses":
        assert body["store"] is False and body["instructions"] and body["max_output_tokens"] == 1000


REPLIES = [
    ScriptedReply(content="Hello " * 40, reasoning="think first"),
    ScriptedReply(tool_calls=[ScriptedToolCall(name="read", arguments={"path": "a" * 300}),
                              ScriptedToolCall(name="bad", arguments={}, raw_arguments='{"x": ')]),
    ScriptedReply(refusal="I can't help with that."),
    ScriptedReply(content="cut short", finish_reason="length"),
]


@pytest.mark.parametrize("reply", REPLIES, ids=["text+reasoning", "calls", "refusal", "incomplete"])
def test_scripted_responses_events_parse_into_sdk_models(reply: ScriptedReply) -> None:
    body = {"model": "gpt-5-mini", "input": [], "stream": True, "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "low"}, "tools": []}
    use = scripted_responses.usage(2000, 1024, 50, 20)
    events = scripted_responses.events(reply, body, use, reply.reasoning)
    # each event parsed by the class its own `type` names: the static type is any of them
    parsed: list[Any] = [EVENT_CLASSES[e["type"]].model_validate(e) for e in events]
    assert [p.sequence_number for p in parsed] == list(range(len(parsed)))
    final = parsed[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert final.response.usage.input_tokens_details.cached_tokens == 1024
    done = [p for p in parsed if p.type == "response.output_item.done"]
    if reply.reasoning:
        assert done[0].item.type == "reasoning" and done[0].item.encrypted_content
    if reply.finish_reason == "length":
        assert final.response.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("reply", REPLIES, ids=["text+reasoning", "calls", "refusal", "incomplete"])
async def test_scripted_chat_chunks_and_completions_parse(reply: ScriptedReply) -> None:
    import json

    import httpx2

    transport = ScriptedTransport(lambda body: reply)
    body = {"model": "gpt-5-mini", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "low"}
    for stream in (True, False):
        request = httpx2.Request("POST", "http://scripted.local/v1/chat/completions",
                                content=json.dumps({**body, "stream": stream}).encode())
        response = await transport.handle_async_request(request)
        raw = (await response.aread()).decode()
        if not stream:
            completion = ChatCompletion.model_validate_json(raw)
            assert completion.usage is not None and completion.usage.completion_tokens_details is not None
            continue
        data = [line[6:] for line in raw.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]
        chunks = [ChatCompletionChunk.model_validate_json(d) for d in data]
        usage = chunks[-1].usage
        assert usage is not None and usage.prompt_tokens_details is not None


async def test_offline_client_exposes_its_transport() -> None:
    client = scripted_client(ScriptedGamma())
    assert scripted_transport(client) is not None


@pytest.mark.parametrize("event", ["error", "response.failed"])
def test_scripted_error_events_parse(event: str) -> None:
    # the SDK's ErrorEvent is the flat shape; the live API nests it (the double's default, reference §3.1)
    error = {"code": "server_error", "message": "overloaded", "shape": "flat"}
    reply = ScriptedReply(stream_error={**error, "event": "failed"} if event == "response.failed" else error)
    events = scripted_responses.events(reply, {"model": "gpt-5-mini", "input": []}, scripted_responses.usage(1, 0, 1, 0), None)
    # each event parsed by the class its own `type` names: the static type is any of them
    parsed: list[Any] = [EVENT_CLASSES[e["type"]].model_validate(e) for e in events]
    assert [p.type for p in parsed] == ["response.created", event]
    last = parsed[-1]
    code = last.response.error.code if event == "response.failed" else last.code
    assert code == "server_error"
