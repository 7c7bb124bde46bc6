"""Contract of the engine's events (services/runtime/engine/loop.py) with their readers: what a message
carries travels once, in its `message_end` (services/runtime/README.md "Events"). A `message_start`
names the message without its payload; `tool_execution_start` names the call, whose arguments are in the
assistant's `message_end` just before it; the proxy's AG-UI translation (services/proxy/agui/) still
sends each call's arguments, as the model wrote them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from services.proxy.agui.agui_translate import Translator
from services.runtime.engine.agent import Agent
from services.runtime.engine.types import (
    AgentContext,
    AgentEvent,
    Emit,
    RunHooks,
    Tool,
    ToolContext,
    ToolOutcome,
)
from shared.contracts.records.messages import AssistantMessage, TextContent, ToolCall, UserMessage
from shared.contracts.streams.events import SessionEvent

BIG = {"v": [{"a": i} for i in range(500)]}


async def events_of_a_run() -> list[dict[str, Any]]:
    """A prompt, one call with a large argument, its result, a final reply: the events as SSE sends them."""
    replies = [AssistantMessage(content=[ToolCall(id="c1", name="put", arguments=BIG)], stop_reason="toolUse"),
               AssistantMessage(content=[TextContent(text="done")])]

    async def stream(context: AgentContext, emit: Emit, signal: asyncio.Event) -> AssistantMessage:
        start = AssistantMessage()  # as model/openai_stream.py starts a reply: no content yet
        await emit(AgentEvent(type="message_start", data={"message": start.model_dump(by_alias=True)}))
        return replies.pop(0)

    async def put(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(content="stored " + "x" * 3000, details={"stored": len(args["v"])})

    events: list[AgentEvent] = []

    async def emit(ev: AgentEvent) -> None:
        events.append(ev)

    tool = Tool(name="put", description="put", parameters={"type": "object", "properties": {}}, execute=put)
    await Agent(AgentContext("system", [], [tool]), RunHooks(stream=stream), emit).prompt(
        [UserMessage(content="please store " + "y" * 3000)])
    return [json.loads(SessionEvent(type=e.type, session_id="s_1", data=e.data).model_dump_json()) for e in events]


async def test_a_messages_payload_travels_once_in_its_message_end() -> None:
    events = await events_of_a_run()
    starts = [e["data"]["message"] for e in events if e["type"] == "message_start"]
    ends = [e["data"]["message"] for e in events if e["type"] == "message_end"]
    assert [m["role"] for m in starts] == [m["role"] for m in ends] == ["user", "assistant", "toolResult", "assistant"]
    for start, end in zip(starts, ends, strict=True):
        if start["role"] != "assistant":  # a reply's start (the model's stream) has no content yet
            assert not {"content", "images", "details"} & start.keys()
            assert {k: v for k, v in end.items() if k in start} == start  # the same message, named
    user, result = ends[0], ends[2]
    assert user["content"].startswith("please store") and result["details"] == {"stored": 500}
    assert starts[2]["toolCallId"] == "c1" and starts[2]["toolName"] == "put"


async def test_a_calls_arguments_travel_in_its_assistant_message_and_reach_ag_ui() -> None:
    events = await events_of_a_run()
    [start] = [e for e in events if e["type"] == "tool_execution_start"]
    assert start["data"] == {"toolCallId": "c1", "toolName": "put"}
    before = events[:events.index(start)]
    [call] = [c for e in before if e["type"] == "message_end" and e["data"]["message"]["role"] == "assistant"
              for c in e["data"]["message"]["content"]]
    assert call["id"] == "c1" and call["arguments"] == BIG
    t = Translator("s_1", "r", None)
    out = [a for e in events for a in t.feed(e).events]
    [args] = [a for a in out if a.type.value == "TOOL_CALL_ARGS"]
    assert json.loads(args.delta) == BIG  # type: ignore[attr-defined]
