"""What goes back to the model (model/convert.py): reasoning items only to the model and snapshot that
made them, never without their following item; `phase` kept for the models that have it (reference
§1.6, §1.8, §1.9, §1.11)."""

from __future__ import annotations

from typing import Any

from services.runtime.model.convert import to_responses_input
from shared.contracts.records.messages import (
    AgentMessage,
    AssistantMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
)


def reply(n: int, model: str, snapshot: str | None, *, text: str = "", call: bool = True) -> AssistantMessage:
    content: list[Any] = [ThinkingContent(thinking="", item={"type": "reasoning", "id": f"rs_{n}", "summary": [],
                                                             "encrypted_content": f"gAAAA{n}"})]
    if text:
        content.append(TextContent(text=text, phase="commentary"))
    if call:
        content.append(ToolCall(id=f"c{n}", name="read", arguments={}))
    return AssistantMessage(model=model, snapshot=snapshot, content=content)


def reasoning_ids(items: list[dict[str, Any]]) -> list[str]:
    return [i["id"] for i in items if i["type"] == "reasoning"]


def test_reasoning_goes_back_only_to_its_model_and_snapshot() -> None:
    messages: list[AgentMessage] = [reply(1, "gpt-5-mini", "gpt-5-mini-2025-08-07"),
                                    reply(2, "gpt-5", "gpt-5-2025-08-07"),
                                    reply(3, "gpt-5-mini", "gpt-5-mini-2026-01-15")]  # the alias moved on
    assert reasoning_ids(to_responses_input(messages, "gpt-5-mini", trusted_role="developer")) == ["rs_3"]
    assert reasoning_ids(to_responses_input(messages, "gpt-5", trusted_role="developer")) == ["rs_2"]
    # A dated name is its own snapshot; an older transcript without snapshots replays by name.
    assert reasoning_ids(to_responses_input(messages, "gpt-5-mini-2025-08-07", trusted_role="developer")) == []
    old = [reply(4, "gpt-5-mini", None), reply(5, "gpt-5-mini", None)]
    assert reasoning_ids(to_responses_input(old, "gpt-5-mini", trusted_role="developer")) == ["rs_4", "rs_5"]


def test_reasoning_never_goes_without_its_following_item() -> None:
    items = to_responses_input([reply(1, "gpt-5-mini", None, call=False)], "gpt-5-mini", trusted_role="developer")
    assert items == []


def test_phase_is_replayed_only_to_models_that_have_it() -> None:
    messages: list[AgentMessage] = [reply(1, "gpt-5.4", None, text="Reading the file first.")]
    with_phase = to_responses_input(messages, "gpt-5.4", trusted_role="developer", phase=True)
    message = next(i for i in with_phase if i["type"] == "message")
    assert message == {"type": "message", "role": "assistant", "content": "Reading the file first.",
                       "phase": "commentary"}
    without = to_responses_input(messages, "gpt-5.4", trusted_role="developer")
    assert "phase" not in next(i for i in without if i["type"] == "message")
