"""Repairs of a replayed history the model API refused (docs/architecture.md "Model calls: retries and
recovery"): one rule for the runtime, which repairs its live context and records a `history_repair`
transcript entry, and for every replay of the transcript (shared/history/context.py), so later turns, a wake
and the compaction service send the repaired history too.

- `strip_reasoning`: a replayed reasoning item's encrypted content could not be verified (reference
  note §1.8/1.9, `invalid_encrypted_content`): no reasoning item is replayed any more (the summaries stay
  for the reader);
- `remove_images`: the model refused an image part: each image becomes a short text stand-in;
- `redact`: a prompt filter flagged one replayed item (reference §4.1 `invalid_prompt`, §7.1 Azure's
  `content_filter`): its content becomes a note saying it was removed.
Pure: a repaired message is a copy; the transcript's own lines are never rewritten.
"""

from __future__ import annotations

from typing import Literal

from shared.contracts.records.messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    CustomMessage,
    TextContent,
    ThinkingContent,
    ToolResultMessage,
    UserMessage,
)

RepairAction = Literal["strip_reasoning", "remove_images", "redact"]

IMAGE_REMOVED = "[image removed: the model refused it]"
REDACTED = "[item removed: the model's provider refused it]"


def has_target(m: AgentMessage, action: RepairAction) -> bool:
    """Whether `action` changes `m` (the runtime repairs only what it would change)."""
    if action == "strip_reasoning":
        return isinstance(m, AssistantMessage) and any(
            isinstance(c, ThinkingContent) and c.item is not None for c in m.content)
    if action == "remove_images":
        return isinstance(m, UserMessage | ToolResultMessage) and bool(m.images)
    return True


def repaired(m: AgentMessage, action: RepairAction) -> AgentMessage:
    if not has_target(m, action):
        return m
    if action == "strip_reasoning":
        assert isinstance(m, AssistantMessage)
        return m.model_copy(update={"content": [_unreplayable(c) for c in m.content]})
    if action == "remove_images":
        return _without_images(m)
    return _redacted(m)


def _unreplayable(c: object) -> object:
    return c.model_copy(update={"item": None}) if isinstance(c, ThinkingContent) else c


def _without_images(m: AgentMessage) -> AgentMessage:
    if isinstance(m, UserMessage):
        stand_ins = "\n".join(IMAGE_REMOVED for _ in m.images or [])
        return m.model_copy(update={"images": None, "content": f"{m.content}\n{stand_ins}" if m.content else stand_ins})
    assert isinstance(m, ToolResultMessage)
    return m.model_copy(update={"images": None,
                                "content": [*m.content, *(TextContent(text=IMAGE_REMOVED) for _ in m.images or [])]})


def _redacted(m: AgentMessage) -> AgentMessage:
    if isinstance(m, UserMessage | CustomMessage):
        return m.model_copy(update={"content": REDACTED, "images": None} if isinstance(m, UserMessage)
                            else {"content": REDACTED})
    if isinstance(m, ToolResultMessage):
        return m.model_copy(update={"content": [TextContent(text=REDACTED)], "images": None})
    if isinstance(m, CompactionSummaryMessage):
        return m.model_copy(update={"summary": REDACTED})
    assert isinstance(m, AssistantMessage)
    # Tool calls stay (their results follow them); the text and the reasoning go.
    kept = [c for c in m.content if not isinstance(c, TextContent | ThinkingContent)]
    return m.model_copy(update={"content": [TextContent(text=REDACTED), *kept], "refusal": None})
