"""Agent messages as plain typed data (Pi's AgentMessage, camelCase on disk)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr

from shared.contracts.base import CamelContract, now_ms


class _Msg(CamelContract):
    model_config = ConfigDict(extra="ignore")


class TextContent(_Msg):
    type: Literal["text"] = "text"
    text: str
    # Responses `phase` of the assistant message item this text came in (`commentary` for a preamble,
    # `final_answer`), replayed as received to the models that have it (reference §1.11).
    phase: Literal["commentary", "final_answer"] | None = None


ImageMime = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
SHA256_HEX = r"^[0-9a-f]{64}$"


class ImageRef(_Msg):
    """An image of the conversation, by reference: its bytes live once on the session disk under
    `.images/{sha256}` (shared/media/images.py), already within the model's limits, so the transcript stays
    small and every replay sends the same bytes (docs/architecture.md "Images")."""

    sha256: str = Field(pattern=SHA256_HEX)
    mime_type: ImageMime
    width: int = Field(ge=1)
    height: int = Field(ge=1)
    bytes: int = Field(ge=1)
    path: str | None = None  # the workspace file it came from (display, summaries), if any


class ThinkingContent(_Msg):
    """Reasoning. With the Responses API, `item` is the provider's reasoning item exactly as received
    (its `encrypted_content` included): replayed verbatim to the same model, never to another one."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    item: dict[str, Any] | None = None


KEPT_ARGUMENTS_CHARS = 4096  # a tool call's arguments at least this long keep their JSON text


class ToolCall(_Msg):
    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # The arguments as JSON text, kept once made when large: every model call renders and counts the
    # whole context again, and a large argument encoded at each call would hold the loop every
    # session of the worker shares (docs/architecture.md "Bounded work"); small ones cost less to
    # encode again than to keep. Keyed by the dict's id: a copy with other arguments encodes its own.
    _json: dict[tuple[int, bool], str] = PrivateAttr(default_factory=dict)

    def arguments_json(self, sort_keys: bool = False) -> str:
        """`json.dumps(arguments, ensure_ascii=False, sort_keys=sort_keys)`, cached."""
        key = (id(self.arguments), sort_keys)
        text = self._json.get(key)
        if text is None:
            text = json.dumps(self.arguments, ensure_ascii=False, sort_keys=sort_keys)
            if len(text) >= KEPT_ARGUMENTS_CHARS:
                if any(k[0] != key[0] for k in self._json):
                    self._json.clear()  # another dict's forms: at most the current dict's two are kept
                self._json[key] = text
        return text

    def __eq__(self, other: object) -> bool:
        """By the fields only (pydantic's compares private attributes too: the cache above is none of them)."""
        if not isinstance(other, ToolCall):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__


AssistantContent = Annotated[TextContent | ThinkingContent | ToolCall, Field(discriminator="type")]
# `contentFilter`: the provider's content filter stopped the reply (reference §3.1/3.2), its own
# outcome: shown to the user as such, never told to the model as the output limit.
StopReason = Literal["stop", "toolUse", "length", "contentFilter", "error", "aborted"]


class Usage(_Msg):
    input: int = 0
    output: int = 0
    cache_read: int = 0  # input tokens the provider served from its prompt cache
    # input tokens written to the prompt cache (`cache_write_tokens`, billed 1.25x from GPT-5.6; part
    # of `input`, as `cache_read` is; 0 when the server does not report it: reference §5)
    cache_write: int = 0
    reasoning: int = 0  # output tokens spent on reasoning (part of `output`)
    total_tokens: int = 0
    # Counted here, not reported by the API: a request cancelled by an abort ends before its usage
    # arrives, yet the provider bills its input and what it streamed (model/openai_stream.py).
    estimated: bool = False


class UserMessage(_Msg):
    role: Literal["user"] = "user"
    content: str
    images: list[ImageRef] | None = None  # attachments; None (not []) keeps text-only lines unchanged
    timestamp: int = Field(default_factory=now_ms)


class AssistantMessage(_Msg):
    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent] = Field(default_factory=list)
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    # An error the harness decided, not the model call (engine/loop.py): the run's budget spent, a
    # second empty reply, a second reply cut at the output limit. None: the call failed.
    error_kind: Literal["budget", "empty_reply", "output_limit"] | None = None
    model: str = ""
    # The dated snapshot that answered (the response's `model`, e.g. gpt-5-mini-2025-08-07): its
    # reasoning items are replayed to that snapshot only (reference §1.8, §1.9).
    snapshot: str | None = Field(None, max_length=200)
    usage: Usage = Field(default_factory=Usage)
    timestamp: int = Field(default_factory=now_ms)
    api: Literal["responses", "chat"] | None = None
    refusal: str | None = None  # the model declined; shown to the user as a refusal
    # Plain text that ended the run without message_user: delivered to the user as a blocking message.
    implicit_message_user: bool = False

    def tool_calls(self) -> list[ToolCall]:
        return [c for c in self.content if isinstance(c, ToolCall)]

    def text(self) -> str:
        return "".join(c.text for c in self.content if isinstance(c, TextContent))


class ToolResultMessage(_Msg):
    role: Literal["toolResult"] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: list[TextContent] = Field(default_factory=list)
    images: list[ImageRef] | None = None  # an image the tool returned (`read` of a PNG): data, never instructions
    details: dict[str, Any] | None = None
    is_error: bool = False
    timestamp: int = Field(default_factory=now_ms)

    def text(self) -> str:
        return "".join(c.text for c in self.content)


class CustomMessage(_Msg):
    """A trusted harness message. Given the trusted role only at the model boundary (docs/architecture.md
    "Trust boundaries"); `details` never reaches the model."""

    role: Literal["custom"] = "custom"
    custom_type: str
    content: str
    display: bool = False
    details: dict[str, Any] = Field(default_factory=dict)
    timestamp: int = Field(default_factory=now_ms)


class CompactionSummaryMessage(_Msg):
    role: Literal["compactionSummary"] = "compactionSummary"
    summary: str
    tokens_before: int = 0
    timestamp: int = Field(default_factory=now_ms)


AgentMessage = Annotated[
    UserMessage | AssistantMessage | ToolResultMessage | CustomMessage | CompactionSummaryMessage,
    Field(discriminator="role"),
]
