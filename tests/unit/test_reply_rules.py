"""The loop's handling of replies that are not plain answers (engine/reply_rules.py): an empty or
reasoning-only reply gets one nudge then an error, a content-filtered reply ends the run without an
output-limit guidance, tool calls cut at the output limit are not run, a run's budget ends it."""

from __future__ import annotations

from typing import Any

import pytest

from services.runtime.engine.agent import Agent
from services.runtime.engine.types import (
    AgentContext,
    AgentEvent,
    RunBudget,
    RunHooks,
    ToolContext,
    ToolOutcome,
)
from services.runtime.model.convert import to_openai, to_responses_input
from shared.contracts.records.messages import (
    AssistantMessage,
    CustomMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from tests.unit.test_runtime_engine import FakeStream, tool

pytestmark = pytest.mark.timeout(30)


def reasoning_only() -> AssistantMessage:
    return AssistantMessage(model="gpt-5-mini", content=[ThinkingContent(thinking="hmm", item={
        "id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA"})])


def agent_with(replies: list[AssistantMessage], ran: list[str] | None = None,
               budget: RunBudget | None = None) -> tuple[Agent, FakeStream, list[AgentEvent]]:
    stream = FakeStream(replies)
    events: list[AgentEvent] = []

    async def emit(ev: AgentEvent) -> None:
        events.append(ev)

    async def write(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        (ran if ran is not None else []).append(str(args))
        return ToolOutcome(content="written")

    hooks = RunHooks(stream=stream, budget=budget or RunBudget())
    return Agent(AgentContext("sys", [], [tool("write", write)]), hooks, emit), stream, events


def guidance(agent: Agent) -> list[CustomMessage]:
    return [m for m in agent.messages if isinstance(m, CustomMessage)]


async def test_an_empty_reply_gets_one_nudge_then_a_visible_error() -> None:
    agent, stream, events = agent_with([reasoning_only(), AssistantMessage(content=[TextContent(text="Here.")])])
    await agent.prompt([UserMessage(content="go")])
    nudges = guidance(agent)
    assert len(nudges) == 1 and nudges[0].details["reason"] == "empty_reply" and "no text" in nudges[0].content
    assert agent.messages[-1].text() == "Here." and len(stream.seen) == 2  # type: ignore[union-attr]
    # The empty reply is not replayed: its reasoning item cannot go alone, an empty assistant message is refused.
    assert [m["role"] for m in to_openai("sys", stream.seen[1], trusted_role="developer")] == [
        "system", "user", "developer"]
    assert [i.get("role") for i in to_responses_input(stream.seen[1], "gpt-5-mini", trusted_role="developer")] == [
        "user", "developer"]

    agent, stream, events = agent_with([reasoning_only(), reasoning_only(), AssistantMessage()])
    await agent.prompt([UserMessage(content="go")])
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "error" and last.error_kind == "empty_reply"
    assert len(stream.seen) == 2 and len(guidance(agent)) == 1
    assert events[-1].type == "agent_end" and events[-1].data["stopReason"] == "error"


async def test_a_content_filtered_reply_ends_the_run_and_is_never_told_as_the_output_limit() -> None:
    filtered = AssistantMessage(content=[TextContent(text="Some")], stop_reason="contentFilter")
    agent, stream, events = agent_with([filtered, AssistantMessage(content=[TextContent(text="more")])])
    await agent.prompt([UserMessage(content="go")])
    assert len(stream.seen) == 1 and guidance(agent) == []
    assert events[-1].type == "agent_end" and events[-1].data["stopReason"] == "contentFilter"


async def test_tool_calls_cut_at_the_output_limit_are_not_run_and_the_model_is_told() -> None:
    cut = AssistantMessage(stop_reason="length", content=[
        ToolCall(id="c1", name="write", arguments={"path": "a.txt"}),
        ToolCall(id="c2", name="write", arguments={"__invalid_json__": '{"path": "b.txt", "content": "ab'})])
    ran: list[str] = []
    agent, stream, _ = agent_with([cut, AssistantMessage(content=[TextContent(text="retrying smaller")])], ran)
    await agent.prompt([UserMessage(content="go")])
    assert ran == []
    results = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert [r.tool_call_id for r in results] == ["c1", "c2"] and all(r.is_error for r in results)
    assert all("output token limit" in r.text() and "not run" in r.text() for r in results)
    assert guidance(agent) == [] and len(stream.seen) == 2  # the results say it; no extra guidance


async def test_a_second_cut_in_a_row_ends_the_run_with_an_error() -> None:
    def cut() -> AssistantMessage:
        return AssistantMessage(stop_reason="length", content=[ToolCall(id="c", name="write", arguments={})])

    agent, stream, _ = agent_with([cut(), cut(), AssistantMessage(content=[TextContent(text="never")])])
    await agent.prompt([UserMessage(content="go")])
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.error_kind == "output_limit" and len(stream.seen) == 2


@pytest.mark.parametrize("budget", [RunBudget(model_calls=3), RunBudget(tokens=250)], ids=["calls", "tokens"])
async def test_the_run_budget_ends_the_loop_with_a_clear_message(budget: RunBudget) -> None:
    def step(i: int) -> AssistantMessage:
        return AssistantMessage(stop_reason="toolUse", usage=Usage(input=90, output=10),
                                content=[ToolCall(id=f"c{i}", name="write", arguments={"path": f"{i}.txt"})])

    ran: list[str] = []
    agent, stream, events = agent_with([step(i) for i in range(10)], ran, budget)
    await agent.prompt([UserMessage(content="go")])
    assert len(stream.seen) == 3 and len(ran) == 3  # every call made had its tool run: nothing lost
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage) and last.stop_reason == "error" and last.error_kind == "budget"
    assert ("3 model calls" if budget.model_calls else "250 tokens") in (last.error_message or "")
    assert [e.type for e in events[-4:]] == ["message_start", "message_end", "turn_end", "agent_end"]
