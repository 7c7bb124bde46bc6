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
    ToolResultMessage,
    UserMessage,
)

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
        return {"role": "user", "content": SUMMARY_PREFIX + "<summary>\n" + m.summary + "\n</summary>"}
    if isinstance(m, ToolResultMessage):
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.text()}
    if isinstance(m, AssistantMessage):
        if m.stop_reason in ("error", "aborted") and not m.tool_calls() and not m.text():
            return None  # a failed call has nothing the model could continue from
        out: dict[str, Any] = {"role": "assistant", "content": m.text() or None}
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
