"""The harness against the strict double, in process (engine/agent.py over the real openai client and the
scripted transport): what the real API would accept works; what it would refuse is a finding, marked
now met by the request building from the model catalogue (shared/catalogue/). Each finding names the reference
rule (`openai-api-rules.md`) the double enforces."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scripted.gamma import ScriptedGamma
from scripted.transport import scripted_client, scripted_transport
from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, AgentEvent, RunHooks, Tool, ToolContext, ToolOutcome
from services.runtime.model.model_api import ApiName
from services.runtime.model.openai_stream import ModelSettings, OpenAIStream
from shared.contracts.records.messages import AssistantMessage, UserMessage
from shared.history.tokens import TokenCounter

STEPS = [{"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]}, {"content": "done"}]


async def _echo(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
    return ToolOutcome(content=str(args.get("text", ""))[:20])


ECHO = Tool(name="echo", description="Echo a text.", parameters={
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}, execute=_echo)


async def converse(model: str, api: ApiName, effort: str | None = None,
                   max_output_tokens: int | None = None) -> tuple[AssistantMessage, list[tuple[str, dict[str, Any]]]]:
    """A tool call, its result, then the answer: two model calls, as every tool-using session makes."""
    client = scripted_client(ScriptedGamma())
    settings = ModelSettings(model=model, api=api, reasoning_effort=effort, max_output_tokens=max_output_tokens)
    events: list[AgentEvent] = []

    async def emit(ev: AgentEvent) -> None:
        events.append(ev)

    agent = Agent(AgentContext("You are Gamma.", [], [ECHO]), RunHooks(stream=OpenAIStream(client, settings,
                                                                                           TokenCounter())), emit)
    await agent.prompt([UserMessage(content="script:" + json.dumps(STEPS))])
    last = agent.messages[-1]
    assert isinstance(last, AssistantMessage)
    transport = scripted_transport(client)
    assert transport is not None
    return last, list(transport.requests)


def completed(last: AssistantMessage) -> bool:
    return last.stop_reason != "error" and last.text() == "done"


@pytest.mark.parametrize(("model", "api", "effort"), [
    ("gpt-4o", "chat", None), ("gpt-4o", "responses", None), ("gpt-4.1-mini", "chat", None),
    ("gpt-5-mini", "chat", None), ("gpt-5-mini", "responses", "low"), ("gpt-5.1", "responses", None),
    ("o4-mini", "responses", "high"), ("gpt-5.4", "chat", None), ("gpt-5.6-sol", "responses", "max"),
])
async def test_what_the_real_api_accepts_completes(model: str, api: ApiName, effort: str | None) -> None:
    last, requests = await converse(model, api, effort)
    assert completed(last), last.error_message
    assert len(requests) == 2


async def test_the_default_model_over_responses_replays_its_reasoning_with_encrypted_content() -> None:
    """reference §1.1-1.3: gpt-5-mini reasons at medium with no effort sent; without `include` its reasoning
    item comes back id-only, and replaying it under `store:false` is a 404 on the second call."""
    last, _ = await converse("gpt-5-mini", "responses")
    assert completed(last), last.error_message


async def test_reasoning_summaries_are_requested_from_a_reasoning_model() -> None:
    """reference §1.12: summaries come only when `reasoning.summary` is set."""
    _, requests = await converse("gpt-5-mini", "responses", "low")
    assert all((body.get("reasoning") or {}).get("summary") for _, body in requests)


@pytest.mark.parametrize(("model", "api", "effort", "max_output"), [
    ("gpt-4o", "responses", "low", None),  # §2.1: no effort parameter on gpt-4o/4.1
    ("gpt-4.1", "chat", "medium", None),
    ("gpt-5.1", "responses", "minimal", None),  # §2.1: minimal from 5.1 on is a 400
    ("o3", "chat", "low", None),  # §2.2: parallel_tool_calls refused by o-series on Chat, even false
    ("gpt-5.4", "chat", "low", None),  # §2.1: Chat + function tools + effort ≠ none from 5.4 on
    ("gpt-5.6-sol", "chat", None, None),  # §2.1: on 5.6 the default effort (medium) counts
    ("gpt-4o", "responses", None, 32_000),  # §2.2/§2.3: GAMMA_MAX_OUTPUT_TOKENS' 32,000 over gpt-4o's 16,384
], ids=["4o-effort", "4.1-chat-effort", "5.1-minimal", "o3-chat-parallel", "5.4-chat-tools-effort",
        "5.6-chat-tools-default", "4o-output-cap"])
async def test_requests_are_adapted_to_their_model(model: str, api: ApiName, effort: str | None,
                                                   max_output: int | None) -> None:
    last, _ = await converse(model, api, effort, max_output)
    assert completed(last), last.error_message


async def test_a_codex_model_on_chat_is_refused_as_the_api_refuses_it() -> None:
    """reference §2.1: codex models are Responses-only (404); the catalogue refuses such a session at
    POST /sessions, so only a hand-built engine setting reaches the double with it."""
    last, _ = await converse("gpt-5.1-codex", "chat")
    assert last.stop_reason == "error" and "only supported in v1/responses" in (last.error_message or "")
