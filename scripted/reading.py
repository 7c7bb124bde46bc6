"""Reading a summarization request back: the scripted summarizer's eyes.

The scripted model receives exactly what a real model receives (system prompt, one user message
with `<conversation>`, maybe `<previous-summary>`, the instructions), so it parses that text; it
never sees the transcript objects.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from services.compaction.serialize import LABELS
from shared.trust.trusted_blocks import extract

_BLOCK_SPLIT = re.compile(r"\n\n(?=\[(?:" + "|".join(re.escape(label) for label in LABELS) + r")\]: )")
_BLOCK = re.compile(r"^\[(" + "|".join(re.escape(label) for label in LABELS) + r")\]: (.*)$", re.DOTALL)
_CALL_NAME = re.compile(r"\s*([A-Za-z_][\w.-]*)\(")
_ARG_NAME = re.compile(r"\s*([A-Za-z_]\w*)=")
_FILE_BLOCKS = re.compile(r"\n*(?:<|&lt;)(read-files|modified-files)>.*?(?:<|&lt;)/\1>", re.DOTALL)  # raw, or neutralised (prompts.py)
_HEADING = re.compile(r"^(#{2,3}) (.+?)\s*$")
_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.)\s+(?:\[[ xX]\]\s+)?(.*\S)\s*$")
TURN_CONTEXT_MARK = "**Turn Context (split turn):**"


@dataclass(frozen=True)
class Block:
    label: str
    text: str


@dataclass
class Request:
    """A summarization request as the model sees it."""

    conversation: list[Block]
    previous_summary: str | None = None
    focus: str | None = None
    turn_prefix: bool = False


def parse_blocks(conversation: str) -> list[Block]:
    out: list[Block] = []
    for raw in _BLOCK_SPLIT.split(conversation.strip()):
        m = _BLOCK.match(raw)
        if m:
            out.append(Block(m.group(1), m.group(2).strip()))
        elif out and raw.strip():
            # a line that only looked like a boundary: part of the previous block
            out[-1] = Block(out[-1].label, out[-1].text + "\n\n" + raw.strip())
    return out


def parse_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """`name(k=<json>, k=<json>); name(...)` back into (name, arguments)."""
    decoder = json.JSONDecoder()
    calls: list[tuple[str, dict[str, Any]]] = []
    i = 0
    while i < len(text):
        m = _CALL_NAME.match(text, i)
        if not m:
            break
        name, i, args = m.group(1), m.end(), {}
        while i < len(text) and text[i] != ")":
            km = _ARG_NAME.match(text, i)
            if not km:
                break
            try:
                value, i = decoder.raw_decode(text, km.end())
            except json.JSONDecodeError:
                break
            args[km.group(1)] = value
            if text.startswith(", ", i):
                i += 2
        calls.append((name, args))
        end = text.find("; ", i)
        if end < 0:
            break
        i = end + 2
    return calls


def parse_request(body: dict[str, Any]) -> Request:
    """The chat-completions body of a summarization call."""
    user = ""
    for message in body.get("messages", []):
        if message.get("role") == "user":
            content = message.get("content")
            user = content if isinstance(content, str) else "".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict)
            )
    # The instructions follow the blocks (a previous summary quotes headings too).
    conversation, end = extract(user, "conversation") or ("", 0)
    previous_block = extract(user[end:], "previous-summary")
    previous = previous_block[0] if previous_block else None
    instructions = user[end + previous_block[1]:] if previous_block else user[end:]
    focus = instructions.rsplit("Additional focus: ", 1)[1].strip() if "Additional focus: " in instructions else None
    return Request(
        conversation=parse_blocks(conversation),
        previous_summary=previous,
        focus=focus,
        turn_prefix="This is the PREFIX of a turn" in instructions,
    )


@dataclass
class Sections:
    """A summary parsed back into its headed lists (the split-turn part folded into the history)."""

    items: dict[str, list[str]] = field(default_factory=dict)

    def get(self, heading: str) -> list[str]:
        return [i for i in self.items.get(heading, []) if i.lower() not in ("(none)", "none")]


def parse_summary(summary: str) -> Sections:
    history, _, turn = summary.partition(TURN_CONTEXT_MARK)
    history = history.rstrip().removesuffix("---").rstrip()
    sections = Sections()
    for part, rename in ((history, {}), (turn, {
        "## Original Request": "## Goal", "## Early Progress": "### Done", "## Context for Suffix": "## Critical Context",
    })):
        heading = ""
        for line in _FILE_BLOCKS.sub("", part).splitlines():
            hm = _HEADING.match(line)
            if hm:
                heading = rename.get(f"{hm.group(1)} {hm.group(2)}", f"{hm.group(1)} {hm.group(2)}")
                continue
            if not heading or not line.strip():
                continue
            im = _ITEM.match(line)
            text = im.group(1) if im else line.strip()
            sections.items.setdefault(heading, []).append(text)
    return sections
