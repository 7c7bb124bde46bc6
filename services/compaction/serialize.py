"""The conversation as plain text for the summarizer (Pi's serializeConversation).

Labelled blocks instead of chat messages, so the summarizer reads a record instead of continuing a
chat. Tool results are cut to 2,000 characters: the summary needs what happened, not every byte.
Trusted injections appear as `[Context]:` blocks: they are harness facts, not user words.
Everything else (user text, tool results, what the model wrote, a summary quoting all of these) is
neutralised against the reserved tags (shared/trust/neutralise.py): none of it can close the prompt's
`<conversation>` wrapper or read as a harness block (docs/architecture.md "Trust boundaries").
Images are `[Image]:` lines naming file, type and size; those the summarizer also receives as image
parts (summary_images.py) carry their number there, so the summary can say what they showed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from shared.contracts.records.messages import (
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
from shared.contracts.records.transcript import TranscriptEntry
from shared.history.context import entry_message
from shared.trust.neutralise import neutralise

TOOL_RESULT_MAX_CHARS = 2000
LABELS = ("User", "Assistant thinking", "Assistant", "Assistant tool calls", "Tool result", "Context")


def truncate(text: str, max_chars: int = TOOL_RESULT_MAX_CHARS) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n\n[... {len(text) - max_chars} more characters truncated]"


def format_call(call: ToolCall) -> str:
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
    return f"{call.name}({args})"


def image_name(image: ImageRef) -> str:
    return neutralise(json.dumps(image.path or image.sha256[:12]))


def image_lines(images: list[ImageRef] | None, shown: Mapping[str, int] | None = None) -> list[str]:
    """Images as text: the summary keeps what was seen (file, type, size, and for the images sent
    along, their number) and the image parts of the summarized messages are gone from the next
    request (docs/architecture.md "Images")."""
    lines = []
    for i in images or []:
        number = (shown or {}).get(i.sha256)
        seen = f", attached as image #{number}" if number is not None else ""
        lines.append(f"[Image]: {image_name(i)} ({i.mime_type}, {i.width}x{i.height}{seen})")
    return lines


def serialize_message(message: AgentMessage, shown: Mapping[str, int] | None = None) -> list[str]:
    if isinstance(message, UserMessage):
        said = [f"[User]: {neutralise(message.content)}"] if message.content else []
        return said + image_lines(message.images, shown)
    if isinstance(message, CustomMessage):
        return [f"[Context]: {message.content}"] if message.content else []  # built escaped by its producer
    if isinstance(message, ToolResultMessage):
        text = message.text()
        if message.is_error and text and not text.lower().startswith("error"):
            text = "Error: " + text  # the summary must not report a failed step as done
        return ([f"[Tool result]: {neutralise(truncate(text))}"] if text else []) + image_lines(message.images, shown)
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


def serialize_messages(messages: Iterable[AgentMessage], shown: Mapping[str, int] | None = None) -> str:
    return "\n\n".join(part for m in messages for part in serialize_message(m, shown))


def serialize_entries(entries: Iterable[TranscriptEntry], shown: Mapping[str, int] | None = None) -> str:
    """`shown`: image hash -> the number of its image part in the summarizer's request."""
    return serialize_messages((m for e in entries if (m := entry_message(e)) is not None), shown)
