"""The end of a model stream read the way the API means it (reference §3, §5), on hand-made SSE bodies
through the real `openai` client: a body without its terminal event is no answer (retried like a cut
stream), `content_filter` is its own outcome, a tool call cut at the output limit is marked so, usage is
read as leniently as the SDK reads it, reasoning summaries and tool-call argument progress stream out."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest
from openai import AsyncOpenAI

from services.runtime.engine.types import AgentContext, AgentEvent
from services.runtime.model.chat_api import ChatApi
from services.runtime.model.model_api import StreamError
from services.runtime.model.openai_stream import ModelSettings, OpenAIStream
from services.runtime.model.responses_api import ResponsesApi
from shared.contracts.records.messages import AssistantMessage, TextContent, UserMessage
from shared.contracts.streams.events import ModelRequestData, ReasoningUpdateData, ToolCallProgressData
from shared.history.tokens import TokenCounter

pytestmark = pytest.mark.timeout(30)
URL = "http://model.test/v1"


def client(*bodies: bytes) -> AsyncOpenAI:
    """A real client whose server answers each request with the next body (the last one repeats)."""
    left = list(bodies)

    def answer(request: httpx2.Request) -> httpx2.Response:
        body = left.pop(0) if len(left) > 1 else left[0]
        return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer), base_url=URL)
    return AsyncOpenAI(api_key="k", base_url=URL, http_client=http, max_retries=0)


def responses_wire(*events: dict[str, Any], tail: bytes = b"") -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events) + tail


def chat_wire(*chunks: dict[str, Any], done: bool = True) -> bytes:
    out = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks)
    return out + (b"data: [DONE]\n\n" if done else b"")


USAGE = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
         "input_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 30},
         "output_tokens_details": {"reasoning_tokens": 5}}


def message_item(text: str, phase: str | None = None, status: str = "completed") -> dict[str, Any]:
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return {**item, "phase": phase} if phase else item


def call_item(args: str, status: str = "completed") -> dict[str, Any]:
    return {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "write", "arguments": args,
            "status": status}


def done(item: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def completed(usage: Any = USAGE, kind: str = "completed", reason: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"id": "resp_1", "status": kind, "output": [], "usage": usage}
    if reason:
        response["incomplete_details"] = {"reason": reason}
    return {"type": f"response.{kind}", "response": response}


def text_chunk(text: str) -> dict[str, Any]:
    return {"id": "c1", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


def finish_chunk(reason: str) -> dict[str, Any]:
    return {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


async def read(api: Any, body: bytes) -> tuple[AssistantMessage, list[AgentEvent]]:
    events: list[AgentEvent] = []

    async def emit(ev: AgentEvent) -> None:
        events.append(ev)

    message = await api.consume(client(body), {"model": "gpt-5-mini", "stream": True}, AssistantMessage(), emit,
                                asyncio.Event())
    return message, events


# ---------------------------------------------------------------- no terminal event

async def test_a_responses_body_without_a_terminal_event_is_a_retryable_no_terminal_error() -> None:
    body = responses_wire({"type": "response.created", "response": {"id": "resp_1"}},
                          {"type": "response.output_text.delta", "delta": "Half an ans"},
                          done(message_item("Half an answer")))
    with pytest.raises(StreamError) as info:
        await read(ResponsesApi(), body)
    assert info.value.retryable and info.value.kind == "no_terminal"
    assert "response.completed" in str(info.value)


@pytest.mark.parametrize("body", [
    chat_wire(text_chunk("Half"), finish_chunk("stop"), done=False),  # a finish, no [DONE]
    chat_wire(text_chunk("Half")),  # [DONE] without a finish_reason
    chat_wire(text_chunk("Half"), done=False),  # neither
], ids=["no-done", "no-finish", "neither"])
async def test_a_chat_body_needs_a_finish_reason_and_done(body: bytes) -> None:
    with pytest.raises(StreamError) as info:
        await read(ChatApi(), body)
    assert info.value.retryable and info.value.kind == "no_terminal"


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_stream_without_its_end_is_retried_like_a_cut_stream(api: str) -> None:
    if api == "responses":
        cut = responses_wire({"type": "response.output_text.delta", "delta": "Half"})
        whole = responses_wire({"type": "response.output_text.delta", "delta": "Whole."},
                               done(message_item("Whole.")), completed())
    else:
        cut = chat_wire(text_chunk("Half"), done=False)
        whole = chat_wire(text_chunk("Whole."), finish_chunk("stop"))
    events: list[AgentEvent] = []

    async def emit(ev: AgentEvent) -> None:
        events.append(ev)

    stream = OpenAIStream(client(cut, whole), ModelSettings(model="gpt-5-mini", api=api, max_retries=2,  # type: ignore[arg-type]
                                                            retry_base_s=0.0), TokenCounter())
    message = await stream(AgentContext("sys", [UserMessage(content="hi")], []), emit, asyncio.Event())
    assert message.stop_reason == "stop" and message.text() == "Whole."
    assert any(e.data.get("restart") for e in events if e.type == "message_update")
    request = ModelRequestData.model_validate(next(e.data for e in events if e.type == "model_request"))
    assert request.attempts == 2


# ---------------------------------------------------------------- finish reasons

async def test_unknown_events_and_unparseable_data_are_skipped() -> None:
    body = responses_wire({"type": "response.brand_new_thing", "x": 1},
                          {"type": "response.output_text.delta", "delta": "Hi."},
                          tail=b"data: {not json at all\n\n" + responses_wire(done(message_item("Hi.")), completed()))
    message, _ = await read(ResponsesApi(), body)
    assert message.stop_reason == "stop" and message.text() == "Hi."


async def test_content_filter_is_its_own_stop_reason_on_both_apis() -> None:
    message, _ = await read(ResponsesApi(), responses_wire(
        {"type": "response.output_text.delta", "delta": "Some"}, done(message_item("Some", status="incomplete")),
        completed(kind="incomplete", reason="content_filter")))
    assert message.stop_reason == "contentFilter" and message.text() == "Some"
    message, _ = await read(ChatApi(), chat_wire(text_chunk("Some"), finish_chunk("content_filter")))
    assert message.stop_reason == "contentFilter" and message.text() == "Some"
    message, _ = await read(ResponsesApi(), responses_wire(
        done(message_item("Cut", status="incomplete")), completed(kind="incomplete", reason="max_output_tokens")))
    assert message.stop_reason == "length"


async def test_a_tool_call_cut_at_the_output_limit_is_marked_length_on_both_apis() -> None:
    message, _ = await read(ResponsesApi(), responses_wire(
        done(call_item('{"path": "a.txt", "content": "abc', status="incomplete")),
        completed(kind="incomplete", reason="max_output_tokens")))
    assert message.stop_reason == "length" and [c.name for c in message.tool_calls()] == ["write"]
    # An incomplete item is cut even if the response's own end says otherwise.
    message, _ = await read(ResponsesApi(), responses_wire(
        done(call_item('{"path": "a.txt"', status="incomplete")), completed()))
    assert message.stop_reason == "length"
    chunk = {"id": "c1", "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write", "arguments": '{"path": "a'}}]}}]}
    message, _ = await read(ChatApi(), chat_wire(chunk, finish_chunk("length")))
    assert message.stop_reason == "length" and [c.name for c in message.tool_calls()] == ["write"]


# ---------------------------------------------------------------- usage, leniently

@pytest.mark.parametrize("usage", [
    {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
     "input_tokens_details": {"cached_tokens": 40}, "output_tokens_details": {"reasoning_tokens": 5}},
    {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
     "input_tokens_details": None, "output_tokens_details": None},
    {"input_tokens": 100, "output_tokens": 20},
    None,
], ids=["no-cache-write", "null-details", "no-details", "null"])
async def test_responses_usage_without_details_does_not_fail_the_reply(usage: Any) -> None:
    message, _ = await read(ResponsesApi(), responses_wire(done(message_item("ok")), completed(usage)))
    assert message.stop_reason == "stop" and message.text() == "ok"
    assert message.usage.input == (100 if usage else 0) and message.usage.cache_write == 0
    if usage:
        assert message.usage.total_tokens == 120


async def test_cache_writes_are_recorded_when_reported() -> None:
    message, _ = await read(ResponsesApi(), responses_wire(done(message_item("ok")), completed()))
    assert (message.usage.cache_read, message.usage.cache_write, message.usage.reasoning) == (40, 30, 5)
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
             "prompt_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 30},
             "completion_tokens_details": None}
    message, _ = await read(ChatApi(), chat_wire(text_chunk("ok"), finish_chunk("stop"),
                                                 {"id": "c1", "choices": [], "usage": usage}))
    assert (message.usage.input, message.usage.cache_read, message.usage.cache_write) == (100, 40, 30)
    bare = {"prompt_tokens": 7, "completion_tokens": None, "total_tokens": None}  # a gateway's nulls
    message, _ = await read(ChatApi(), chat_wire(text_chunk("ok"), finish_chunk("stop"),
                                                 {"id": "c1", "choices": [], "usage": bare}))
    assert (message.usage.input, message.usage.output, message.text()) == (7, 0, "ok")


# ---------------------------------------------------------------- what streams to the client

async def test_reasoning_summaries_stream_as_reasoning_updates_and_phase_is_kept() -> None:
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan. Then act."}]}

    def summary(delta: str, index: int = 0) -> dict[str, Any]:
        return {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0,
                "summary_index": index, "delta": delta}

    body = responses_wire(summary("Plan."), summary(" Then"), summary(" act.", 1), done(reasoning),
                          {"type": "response.output_text.delta", "delta": "Checking."},
                          done(message_item("Checking.", phase="commentary"), 1),
                          done(message_item("Done.", phase="final_answer"), 2), completed())
    message, events = await read(ResponsesApi(), body)
    updates = [ReasoningUpdateData.model_validate(e.data) for e in events if e.type == "reasoning_update"]
    assert [(u.delta, u.summary_index, u.item_id) for u in updates] == [("Plan. Then", 0, "rs_1"), (" act.", 1, "rs_1")]
    assert [c.phase for c in message.content if isinstance(c, TextContent)] == ["commentary", "final_answer"]
    assert message.content[0].type == "thinking"


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_a_large_tool_call_reports_its_argument_progress(api: str) -> None:
    pieces = ['{"path": "big.txt", "content": "', *["x" * 500] * 10, '"}']
    if api == "responses":
        added = {"type": "response.output_item.added", "output_index": 0,
                 "item": {**call_item(""), "status": "in_progress"}}
        deltas = [{"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0,
                   "delta": p} for p in pieces]
        body = responses_wire(added, *deltas, done(call_item("".join(pieces))), completed())
    else:
        first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "write", "arguments": ""}}
        chunks = [{"id": "c1", "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            first if i == 0 else {"index": 0, "function": {"arguments": p}}]}}]} for i, p in enumerate(["", *pieces])]
        body = chat_wire(*chunks, finish_chunk("tool_calls"))
    message, events = await read(ResponsesApi() if api == "responses" else ChatApi(), body)
    progress = [ToolCallProgressData.model_validate(e.data) for e in events if e.type == "tool_call_progress"]
    assert progress and all(p.tool_call_id == "call_1" and p.tool_name == "write" for p in progress)
    assert progress[-1].bytes <= len("".join(pieces)) and progress[-1].bytes >= 4096
    assert message.tool_calls()[0].arguments["content"] == "x" * 5000 and message.stop_reason == "toolUse"


async def test_hostile_shapes_fail_the_reply_cleanly_or_are_bounded() -> None:
    """What a server wrote is hostile: a malformed item is an invalid-reply StreamError (never a crash of
    the run), a huge tool name is only a bounded label in the progress events."""
    for bad in ({"type": "message", "content": 5}, {"type": "reasoning", "summary": "text"},
                {"type": "function_call", "call_id": 3, "name": "write"}, "not an item"):
        with pytest.raises(StreamError) as info:
            await read(ResponsesApi(), responses_wire(done(bad), completed()))  # type: ignore[arg-type]
        assert info.value.kind == "invalid" and not info.value.retryable
    name = "w" * 100_000
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}}
    chunks = [{"id": "c1", "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
        first if i == 0 else {"index": 0, "function": {"arguments": "x" * 2048}}]}}]} for i in range(3)]
    _, events = await read(ChatApi(), chat_wire(*chunks, finish_chunk("tool_calls")))
    progress = [ToolCallProgressData.model_validate(e.data) for e in events if e.type == "tool_call_progress"]
    assert progress and all(len(p.tool_name) == 200 for p in progress)
