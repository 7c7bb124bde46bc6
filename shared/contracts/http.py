"""HTTP request and response bodies of the proxy (served as docs/openapi.json)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from shared.contracts.base import Contract
from shared.contracts.records.client import PromptClientContext
from shared.contracts.records.spend import SessionBudget, SessionSpend
from shared.contracts.records.todo import TodoList
from shared.contracts.streams.inbox import ENTRY_ID, RUN_ID, OnBusy

Variant = Literal["base", "deck-generation", "import"]
Status = Literal["live", "dormant", "waking"]


class ModelConfig(Contract):
    """A session's model (docs/models.md "Sessions"): checked against the model catalogue on create and
    on PATCH (a 422 names the field and the values the model accepts)."""

    # A catalogue name, dated snapshot or Azure deployment; any other name is an unknown model.
    name: str | None = Field(None, max_length=100, pattern=r"^[\w.:/@+-]+$")
    # The SDK's ReasoningEffort values; which of them a model takes is the catalogue's (reference §2.1).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    context_window: int | None = Field(None, ge=1024, le=10_000_000)
    # Responses (OpenAI, reasoning carried across turns) or Chat Completions (any compatible server).
    # Unset on create: the setting GAMMA_MODEL_API decides, and the session keeps that choice.
    api: Literal["responses", "chat"] | None = None


class CreateSession(Contract):
    variant: Variant = "base"
    model: ModelConfig | None = None
    budget: SessionBudget | None = None  # this session's own caps (docs/costs.md "Budgets")


class ModelUsage(Contract):
    """The session's model requests so far, as the API reported them. `cache_hit_ratio` is cached
    input tokens / input tokens (the provider's prompt cache)."""

    requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_hit_ratio: float = 0.0

    @classmethod
    def of(cls, raw: dict[str, int]) -> ModelUsage:
        usage = cls(**{k: int(v) for k, v in raw.items() if k in cls.model_fields and k != "cache_hit_ratio"})
        if usage.input_tokens:
            usage.cache_hit_ratio = round(usage.cached_tokens / usage.input_tokens, 4)
        return usage


class SessionView(Contract):
    id: str
    owner: str
    variant: Variant
    model: ModelConfig
    status: Status
    running: bool
    run_id: str | None = None  # the active run, while `running`
    created_at: int
    updated_at: int
    title: str | None = None  # PATCH /sessions/{id}
    model_usage: ModelUsage | None = None  # GET /sessions/{id} only
    spend: SessionSpend | None = None  # GET /sessions/{id} only: every token priced, and the caps (docs/costs.md)


class ForkOrigin(Contract):
    session_id: str
    entry_id: str


class ForkedSession(SessionView):
    forked_from: ForkOrigin


TITLE_MAX_CHARS = 200
# C0/C1 controls, and the marks that reorder or break the text around them (bidi overrides and
# isolates, line and paragraph separators): a title is shown inline in lists.
_TITLE_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
# Letters that render as nothing (Hangul fillers, the blank Braille pattern): no more visible than a
# format character (ZWSP, word joiner, BOM) or a lone combining mark.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def _visible(c: str) -> bool:
    return unicodedata.category(c)[0] in "LNPS" and c not in _BLANK_LETTERS


class PatchSession(Contract):
    """PATCH /sessions/{id}: the title shown in GET /sessions and the inspector (null clears it), and/or
    the session's model: the fields of `model` given replace the session's (a new `name` without a
    `reasoning_effort` reasons at the new model's default), checked like POST /sessions, recorded in
    the transcript, and used from the next model call on."""

    title: str | None = Field(None, max_length=TITLE_MAX_CHARS * 4)
    model: ModelConfig | None = None

    @model_validator(mode="after")
    def _something(self) -> PatchSession:
        if not self.model_fields_set:
            raise ValueError("nothing to change: give `title` and/or `model`")
        if "model" in self.model_fields_set and (self.model is None or not self.model.model_fields_set):
            raise ValueError("`model` names at least one of name, reasoning_effort, context_window, api")
        return self

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = unicodedata.normalize("NFC", value).strip()
        if not value:
            raise ValueError("a title is 1 or more visible characters (null clears it)")
        if len(value) > TITLE_MAX_CHARS:
            raise ValueError(f"a title is at most {TITLE_MAX_CHARS} characters")
        if _TITLE_REFUSED.search(value):
            raise ValueError("a title may not contain control, bidi or line-separator characters")
        if not any(_visible(c) for c in value):
            raise ValueError("a title is 1 or more visible characters: format characters, marks and blanks "
                             "alone show nothing (null clears it)")
        return value


class SessionList(Contract):
    """One page, newest first; `next_cursor` fetches the next page (absent on the last one)."""

    sessions: list[SessionView]
    next_cursor: str | None = None


class PostMessage(Contract):
    message: str = Field(min_length=1, max_length=100_000)
    client_context: PromptClientContext | None = None
    on_busy: OnBusy = "steer"
    # With steer / follow_up / interrupt: 409, nothing queued, when this run is no longer the active
    # one (the `run_id` of GET /sessions/{id} or of the events).
    expected_run_id: str | None = Field(None, pattern=RUN_ID)
    # Workspace paths of files uploaded before (PUT /files); images become image parts of this message,
    # other files are named to the agent. Each is checked (exists, inside the workspace, within the
    # GAMMA_ATTACHMENTS_* and GAMMA_IMAGE_* limits): a bad one is a 4xx naming it, and nothing is sent.
    attachments: list[str] = Field(default_factory=list, max_length=100)
    # Edit an earlier user message (or regenerate, with the same text): the session is rewound to that
    # message's parent first, and this message starts a new branch there.
    edit_of: str | None = Field(None, pattern=ENTRY_ID)


class MessageAccepted(Contract):
    prompt_id: str
    status: Status
    woke: bool


class UiSync(Contract):
    update: str = Field(max_length=4_000_000)
    snapshot: dict[str, Any] | None = None


class UiState(Contract):
    snapshot: dict[str, Any]
    update: str


class Preview(Contract):
    status: Status
    transcript: list[dict[str, Any]]
    ui: dict[str, Any]
    todo: TodoList


class Transcript(Contract):
    entries: list[dict[str, Any]]
    # Paging (GET /sessions/{sid}/transcript?cursor=&limit=): pass next_cursor back for the next page.
    next_cursor: str = "0"
    has_more: bool = False
    # The tree (docs/architecture.md "Snapshots, rewind and fork"): the active leaf and, with ?tree=1,
    # each entry with more than one child (a branch point) -> its children's ids, in order.
    leaf_id: str | None = None
    branch_points: dict[str, list[str]] | None = None


class RewindBody(Contract):
    entry_id: str = Field(pattern=ENTRY_ID)


class RewindResult(Contract):
    entry_id: str  # the entry rewound to
    leaf_id: str | None  # the new leaf (the entry, or the last of the results of its unrun tool calls)
    from_id: str | None  # the leaf before: rewind to it to switch back
    changed: int  # workspace entries, documents and todo files restored
    aborted_run_id: str | None = None


class ForkBody(Contract):
    entry_id: str | None = Field(None, pattern=ENTRY_ID)  # default: the active leaf


class AbortBody(Contract):
    expected_run_id: str | None = Field(None, pattern=RUN_ID)


class AbortResult(Contract):
    """`aborted`: false when no run was active (a second call, or none started)."""

    aborted: bool
    run_id: str | None = None
    kept: int = 0  # queued steering and follow-ups kept for the next prompt


class FileWritten(Contract):
    """`PUT /sessions/{id}/workspace/files/{path}`: the workspace path written, its size, the revision the
    digest records for it (shared/redis/revnum.py); `created` when there was no file before."""

    path: str
    size: int = Field(ge=0)
    revision: int = Field(ge=1)
    created: bool


class DocumentDeleted(Contract):
    """`DELETE /sessions/{id}/documents/{doc}`: the revision the deck had."""

    doc: str
    deleted: Literal[True]
    revision: int = Field(ge=0)


class CompactBody(Contract):
    instructions: str | None = Field(None, max_length=4000)


class Accepted(Contract):
    ok: bool = True
    request_id: str | None = None


class ErrorBody(Contract):
    error: str
    detail: Any | None = None
