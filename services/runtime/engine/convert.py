"""AgentMessage -> OpenAI chat messages, only at the model boundary (Pi's convertToLlm).

Custom messages become user-role messages with their content; their `details` (trust metadata,
sources) never reach the model. A compaction summary is wrapped like Pi does.
"""

from __future__ import annotations

import json
from typing import Any

from shared.contracts.messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    CustomMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.trusted_blocks import render

SUMMARY_PREFIX = "The conversation history before this point was compacted into the following summary:\n\n"


def to_openai(system_prompt: str, messages: list[AgentMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for m in messages:
        converted = convert_one(m)
        if converted is not None:
            out.append(converted)
    return out


def convert_one(m: AgentMessage) -> dict[str, Any] | None:
    if isinstance(m, UserMessage):
        return {"role": "user", "content": m.content}
    if isinstance(m, CustomMessage):
        return {"role": "user", "content": m.content}
    if isinstance(m, CompactionSummaryMessage):
        return {"role": "user", "content": SUMMARY_PREFIX + render("summary", None, m.summary)}
    if isinstance(m, ToolResultMessage):
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.text()}
    if isinstance(m, AssistantMessage):
        if m.stop_reason in ("error", "aborted") and not m.tool_calls() and not m.text():
            return None  # a failed call has nothing the model could continue from
        out: dict[str, Any] = {"role": "assistant", "content": m.text() or m.refusal or None}
        calls = m.tool_calls()
        if calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
                }
                for c in calls
            ]
        return out
    return None


def to_responses_input(messages: list[AgentMessage], model: str) -> list[dict[str, Any]]:
    """AgentMessage -> Responses input items. Reasoning items are replayed verbatim, in their place,
    only for assistant messages made by `model` (another model cannot read their encrypted content);
    a reasoning item is never sent without the item it preceded (the API refuses a dangling one)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            out.extend(_assistant_items(m, model))
        elif isinstance(m, ToolResultMessage):
            out.append({"type": "function_call_output", "call_id": m.tool_call_id, "output": m.text()})
        else:
            converted = convert_one(m)
            if converted is not None:
                out.append({"type": "message", "role": "user", "content": converted["content"]})
    return out


def _assistant_items(m: AssistantMessage, model: str) -> list[dict[str, Any]]:
    if m.stop_reason in ("error", "aborted") and not m.tool_calls() and not m.text():
        return []
    items: list[dict[str, Any]] = []
    replay = m.model == model
    for c in m.content:
        if isinstance(c, ThinkingContent):
            if replay and c.item is not None:
                items.append(c.item)
        elif isinstance(c, TextContent):
            items.append({"type": "message", "role": "assistant", "content": c.text})
        elif isinstance(c, ToolCall):
            items.append({"type": "function_call", "call_id": c.id, "name": c.name,
                          "arguments": json.dumps(c.arguments, ensure_ascii=False)})
    if m.refusal:
        items.append({"type": "message", "role": "assistant", "content": m.refusal})
    while items and items[-1].get("type") == "reasoning":
        items.pop()
    return items
