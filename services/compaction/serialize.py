"""The conversation as plain text for the summarizer (Pi's serializeConversation).

Labelled blocks instead of chat messages, so the summarizer reads a record instead of continuing a
chat. Tool results are cut to 2,000 characters: the summary needs what happened, not every byte.
Trusted injections appear as `[Context]:` blocks: they are harness facts, not user words.
Everything else (user text, tool results, what the model wrote, a summary quoting all of these) is
neutralised against the reserved tags (shared/neutralise.py): none of it can close the prompt's
`<conversation>` wrapper or read as a harness block (docs/architecture.md "Trust boundaries").
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from shared.context import entry_message
from shared.contracts.messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    CustomMessage,
    ImageRef,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.transcript import TranscriptEntry
from shared.neutralise import neutralise

TOOL_RESULT_MAX_CHARS = 2000
LABELS = ("User", "Assistant thinking", "Assistant", "Assistant tool calls", "Tool result", "Context")


def truncate(text: str, max_chars: int = TOOL_RESULT_MAX_CHARS) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n\n[... {len(text) - max_chars} more characters truncated]"


def format_call(call: ToolCall) -> str:
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
    return f"{call.name}({args})"


def image_lines(images: list[ImageRef] | None) -> list[str]:
    """Images as text: the summary keeps what was seen (file, type, size) and the image parts of the
    summarized messages are gone from the next request (docs/architecture.md "Images")."""
    return [f"[Image]: {neutralise(json.dumps(i.path or i.sha256[:12]))} ({i.mime_type}, {i.width}x{i.height})"
            for i in images or []]


def serialize_message(message: AgentMessage) -> list[str]:
    if isinstance(message, UserMessage):
        return ([f"[User]: {neutralise(message.content)}"] if message.content else []) + image_lines(message.images)
    if isinstance(message, CustomMessage):
        return [f"[Context]: {message.content}"] if message.content else []  # built escaped by its producer
    if isinstance(message, ToolResultMessage):
        text = message.text()
        if message.is_error and text and not text.lower().startswith("error"):
            text = "Error: " + text  # the summary must not report a failed step as done
        return ([f"[Tool result]: {neutralise(truncate(text))}"] if text else []) + image_lines(message.images)
    if isinstance(message, CompactionSummaryMessage):
        return [f"[Context]: {neutralise(message.summary)}"]
    assert isinstance(message, AssistantMessage)
    thinking = [b.thinking for b in message.content if isinstance(b, ThinkingContent)]
    texts = [b.text for b in message.content if isinstance(b, TextContent)]
    calls = [format_call(b) for b in message.content if isinstance(b, ToolCall)]
    parts = []
    if thinking:
        parts.append("[Assistant thinking]: " + neutralise("\n".join(thinking)))
    if texts:
        parts.append("[Assistant]: " + neutralise("\n".join(texts)))
    if calls:
        parts.append("[Assistant tool calls]: " + neutralise("; ".join(calls)))
    return parts


def serialize_messages(messages: Iterable[AgentMessage]) -> str:
    return "\n\n".join(part for m in messages for part in serialize_message(m))


def serialize_entries(entries: Iterable[TranscriptEntry]) -> str:
    return serialize_messages(m for e in entries if (m := entry_message(e)) is not None)
