"""`sessions/{sid}/transcript.jsonl`: Pi's session entries (id/parentId tree), written only by the runtime."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from .base import CamelContract
from .messages import AgentMessage


class _Entry(CamelContract):
    model_config = ConfigDict(extra="ignore")
    id: str
    parent_id: str | None = None
    timestamp: str


class SessionHeader(_Entry):
    type: Literal["session"] = "session"
    version: int = 3
    cwd: str = "workspace"


class MessageEntry(_Entry):
    type: Literal["message"] = "message"
    message: AgentMessage
    prompt_id: str | None = None  # the UserPrompt a user message came from (idempotency on takeover)


class CustomMessageEntry(_Entry):
    type: Literal["custom_message"] = "custom_message"
    custom_type: str
    content: str
    display: bool = False
    details: dict[str, Any] = Field(default_factory=dict)


class SkillActivationEntry(_Entry):
    type: Literal["skill_activation"] = "skill_activation"
    name: str
    skill_type: Literal["workflow", "reference"]
    required_by: str | None = None
    preloaded: bool = False


class CompactionEntry(_Entry):
    type: Literal["compaction"] = "compaction"
    summary: str
    first_kept_entry_id: str
    tokens_before: int = 0
    details: dict[str, Any] = Field(default_factory=dict)
    request_id: str | None = None


class ModelChangeEntry(_Entry):
    type: Literal["model_change"] = "model_change"
    provider: str = "openai"
    model_id: str


TranscriptEntry = Annotated[
    SessionHeader | MessageEntry | CustomMessageEntry | SkillActivationEntry | CompactionEntry | ModelChangeEntry,
    Field(discriminator="type"),
]
ENTRY_ADAPTER: TypeAdapter[TranscriptEntry] = TypeAdapter(TranscriptEntry)


def parse_entries(raw: list[dict[str, Any]]) -> list[TranscriptEntry]:
    """Known entries only; unknown entry types (a newer writer) are skipped, not fatal."""
    out: list[TranscriptEntry] = []
    for item in raw:
        try:
            out.append(ENTRY_ADAPTER.validate_python(item))
        except ValueError:
            continue
    return out
