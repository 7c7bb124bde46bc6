"""AgentMessage -> OpenAI chat messages and Responses input items, only at the model boundary (Pi's
convertToLlm).

Who wrote a message decides how it travels (docs/architecture.md "Trust boundaries"):
- the harness's own messages (custom messages: injections and anchors; the compaction summary) go with
  `trusted_role`: `developer`, a role no user text can take, or `user` where the model or server
  rejects it (ModelSettings.trusted_role);
- user text and tool results are neutralised against the reserved tags (shared/neutralise.py), so in
  neither role can they read as a harness block; so is the summary's body, which quotes the
  conversation;
- assistant text and tool calls go back as the model wrote them: their role says who wrote them.

A custom message's `details` (trust metadata, sources) never reach the model. Pure: the same messages
convert to the same bytes every time (the provider's prefix cache).
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
from shared.neutralise import neutralise
from shared.trusted_blocks import render

from .model_api import TrustedRole

SUMMARY_PREFIX = "The conversation history before this point was compacted into the following summary:\n\n"


def to_openai(system_prompt: str, messages: list[AgentMessage], *, trusted_role: TrustedRole) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for m in messages:
        converted = convert_one(m, trusted_role)
        if converted is not None:
            out.append(converted)
    return out


def convert_one(m: AgentMessage, trusted_role: TrustedRole) -> dict[str, Any] | None:
    if isinstance(m, UserMessage):
        return {"role": "user", "content": neutralise(m.content)}
    if isinstance(m, CustomMessage):
        return {"role": trusted_role, "content": m.content}  # built escaped by its producer
    if isinstance(m, CompactionSummaryMessage):
        return {"role": trusted_role, "content": summary_block(m.summary)}
    if isinstance(m, ToolResultMessage):
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": neutralise(m.text())}
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


def summary_block(summary: str) -> str:
    return SUMMARY_PREFIX + render("summary", None, summary)


def to_responses_input(messages: list[AgentMessage], model: str, *, trusted_role: TrustedRole) -> list[dict[str, Any]]:
    """AgentMessage -> Responses input items. Reasoning items are replayed verbatim, in their place,
    only for assistant messages made by `model` (another model cannot read their encrypted content);
    a reasoning item is never sent without the item it preceded (the API refuses a dangling one)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            out.extend(_assistant_items(m, model))
        elif isinstance(m, ToolResultMessage):
            out.append({"type": "function_call_output", "call_id": m.tool_call_id, "output": neutralise(m.text())})
        else:
            converted = convert_one(m, trusted_role)
            if converted is not None:
                out.append({"type": "message", "role": converted["role"], "content": converted["content"]})
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
