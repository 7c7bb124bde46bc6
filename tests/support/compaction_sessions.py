"""Scripted Gamma sessions as transcript entries, for the compaction tests and `bench/compaction.py`.

A deck-building session: the request, skill loads, a todo plan, reads, writes, edits, injections,
progress messages. The builder keeps entry ids and tool-call ids consistent, like the runtime does.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.contracts.records.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.records.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
    SessionHeader,
    SkillActivationEntry,
    TranscriptEntry,
)
from shared.storage.disk import append_jsonl, session_paths

TS = "2026-01-01T00:00:00.000Z"
TOPICS = ("market sizing", "competitor landscape", "pricing model", "go-to-market plan", "hiring roadmap",
          "customer interviews", "retention metrics", "product roadmap", "risk register", "budget forecast")


@dataclass
class SessionBuilder:
    entries: list[TranscriptEntry] = field(default_factory=list)
    _n: itertools.count = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        if not self.entries:
            self.entries.append(SessionHeader(id=self._id(), timestamp=TS))
        else:  # continuing a transcript: new ids after the existing ones
            self._n = itertools.count(len(self.entries) + 1)

    def _id(self) -> str:
        return f"{next(self._n):08x}"

    def _parent(self) -> str | None:
        return self.entries[-1].id if self.entries else None

    def add(self, entry: TranscriptEntry) -> TranscriptEntry:
        self.entries.append(entry)
        return entry

    def user(self, text: str) -> MessageEntry:
        e = MessageEntry(id=self._id(), parent_id=self._parent(), timestamp=TS, message=UserMessage(content=text))
        self.add(e)
        return e

    def assistant(self, text: str = "") -> MessageEntry:
        e = MessageEntry(id=self._id(), parent_id=self._parent(), timestamp=TS,
                         message=AssistantMessage(content=[TextContent(text=text)], stop_reason="stop"))
        self.add(e)
        return e

    def calls(self, text: str, calls: list[tuple[str, dict[str, Any], str]], error: bool = False) -> MessageEntry:
        """An assistant message with tool calls, then one result per call (in call order)."""
        tool_calls = [ToolCall(id=f"call_{self._id()}", name=n, arguments=a) for n, a, _ in calls]
        content: list[Any] = [TextContent(text=text)] if text else []
        msg = MessageEntry(id=self._id(), parent_id=self._parent(), timestamp=TS,
                           message=AssistantMessage(content=[*content, *tool_calls], stop_reason="toolUse"))
        self.add(msg)
        for call, (_, _, result) in zip(tool_calls, calls, strict=True):
            self.add(MessageEntry(
                id=self._id(), parent_id=self._parent(), timestamp=TS,
                message=ToolResultMessage(tool_call_id=call.id, tool_name=call.name,
                                          content=[TextContent(text=result)], is_error=error),
            ))
            if call.name == "skill":
                self.add(SkillActivationEntry(id=self._id(), parent_id=self._parent(), timestamp=TS,
                                              name=str(call.arguments["name"]), skill_type="workflow"))
        return msg

    def injection(self, kind: str, content: str, source_id: str) -> CustomMessageEntry:
        e = CustomMessageEntry(
            id=self._id(), parent_id=self._parent(), timestamp=TS, custom_type=f"gamma.{kind}", content=content,
            details={"trusted": True, "injectionType": kind, "source": "system", "sourceId": source_id},
        )
        self.add(e)
        return e

    def compaction(self, summary: str, first_kept: str, request_id: str, details: dict[str, Any]) -> CompactionEntry:
        e = CompactionEntry(id=self._id(), parent_id=self._parent(), timestamp=TS, summary=summary,
                            first_kept_entry_id=first_kept, details=details, request_id=request_id)
        self.add(e)
        return e

    def anchor(self, custom_type: str, content: str) -> CustomMessageEntry:
        e = CustomMessageEntry(id=self._id(), parent_id=self._parent(), timestamp=TS, custom_type=custom_type,
                               content=content, details={"trusted": True})
        self.add(e)
        return e

    def write(self, data_dir: Path, sid: str) -> Path:
        """Replace the session's transcript with these entries (what the runtime would have written)."""
        path = session_paths(data_dir, sid).transcript
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        append_jsonl(path, [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in self.entries])
        return path


def todo_items(done: int, total: int, blocked: int = -1) -> list[dict[str, str]]:
    items = []
    for i in range(total):
        status = "complete" if i < done else "in_progress" if i == done else "pending"
        if i == blocked:
            status = "blocked"
        item = {"id": f"t{i + 1}", "content": f"Build the {TOPICS[i % len(TOPICS)]} section", "status": status}
        items.append({**item, "reason": "waiting for the user"} if status == "blocked" else item)
    return items


def deck_session(sections: int = 4, words: int = 300, builder: SessionBuilder | None = None) -> SessionBuilder:
    """A deck request worked section by section; each section reads research and writes a card."""
    b = builder or SessionBuilder()
    b.user("Create a 12-card investor deck for Acme Robotics from brief.md. Use a dark theme. "
           "Keep every card under 60 words and never invent revenue numbers.")
    b.calls("Loading the deck workflow first.", [
        ("skill", {"name": "deck-generation"}, "# deck-generation\n1. Read the brief\n2. Plan the cards\n3. Render"),
        ("skill", {"name": "gml-authoring"}, "# gml-authoring\nCards are <card> elements with a layout attribute."),
    ])
    # one more task than sections: the session ends with a task in progress
    b.calls("", [("todo", {"items": todo_items(0, sections + 1)}, "todo updated")])
    b.calls("", [("read", {"path": "brief.md"}, "Acme Robotics builds warehouse robots. " * 30)])
    b.assistant("I'll use the dark 'Obsidian' theme because the brief asks for a dark look.")
    for s in range(sections):
        topic = TOPICS[s % len(TOPICS)]
        research = " ".join(f"{topic.split()[0]}-fact-{s}-{i}" for i in range(words))
        b.calls(f"Researching {topic}.", [("read", {"path": f"research/{topic.replace(' ', '_')}.md"}, research)])
        b.calls("", [("write", {"path": f"cards/{s + 1:02d}.gml", "content": f"<card title='{topic}'>...</card>"},
                      f"wrote cards/{s + 1:02d}.gml")])
        b.calls("", [("todo", {"items": todo_items(s + 1, sections + 1)}, "todo updated")])
        b.calls("", [("message_user", {"message": f"Finished the {topic} card.", "blockOnUser": False}, "sent")])
    return b


def to_json(entries: list[TranscriptEntry]) -> str:
    return json.dumps([e.model_dump(mode="json", by_alias=True) for e in entries])
