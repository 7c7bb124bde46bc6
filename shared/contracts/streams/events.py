"""`gamma:{sid}:events` (runtime -> proxy SSE). The envelope is typed; `data` is per type."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from shared.contracts.base import TRACEPARENT, Contract, now_ms

EventType = Literal[
    # Pi's engine events
    "agent_start",
    "agent_end",
    "turn_start",
    "turn_end",
    "message_start",
    "message_update",
    "message_end",
    "reasoning_update",  # streamed reasoning summary text (ReasoningUpdateData)
    "tool_call_progress",  # a tool call's arguments still streaming (ToolCallProgressData)
    "tool_execution_start",
    "tool_execution_update",
    "tool_execution_end",
    # Gamma protocol events
    "message_user",
    "todo",
    "ui_update",
    "model_request",
    "status",
    "injection",
    "skill_activated",
    "skill_ended",
    "compaction",
    "error",
    "run_aborted",
    "audit",
    "checklist",
    "budget_reached",  # a spending or token cap stopped the run (BudgetReachedData, docs/costs.md)
    "rewound",  # the active branch moved (a rewind, an edit, a branch switch): refetch the transcript and files
    "viewable_files",  # the viewable-files projection changed (ViewableFilesData)
]


class SessionEvent(Contract):
    type: EventType
    session_id: str
    ts: int = Field(default_factory=now_ms)
    data: dict[str, Any] = Field(default_factory=dict)
    run_id: str | None = None  # the run the event belongs to (none between runs)


# The entry's field with the W3C traceparent of the run that made the event, present only while the
# run is traced (recorded): the proxy continues that trace when it writes the event to an SSE client.
TRACEPARENT_FIELD = "traceparent"


class EventEntry(Contract):
    """The fields of one `gamma:{sid}:events` entry: `data` is a SessionEvent (JSON), sent verbatim as
    an SSE `data:` line; `traceparent` stays on the server side."""

    data: str
    traceparent: str | None = Field(None, pattern=TRACEPARENT)


class MessageUserData(Contract):
    message: str
    block_on_user: bool
    tool_call_id: str
    implicit: bool = False  # plain model text that ended the run, delivered as if via message_user
    refusal: bool = False  # the model refused


class StatusData(Contract):
    status: Literal["live", "dormant", "waking"]
    running: bool
    fence: int | None = None
    run_id: str | None = None  # the run that starts (running) or ended


class ViewableFilesData(Contract):
    """`viewable_files`: the workspace's viewable files changed since the last event (or the wake's
    `status`): paths `added` and `removed`, and how many there are now. After a rewind the whole list
    comes as `viewableFiles`. `truncated`: a list was cut at 500 paths; list the workspace instead."""

    model_config = ConfigDict(populate_by_name=True)
    added: list[str] = []
    removed: list[str] = []
    count: int
    truncated: bool = False
    viewable_files: list[str] | None = Field(None, alias="viewableFiles")


class RunAbortedData(Contract):
    """`run_aborted`: a run ended by POST /abort or by an interrupting message. `kept` user messages
    and injections that were queued for it (steer, follow-up) wait for the next prompt."""

    run_id: str
    reason: Literal["user", "interrupt"]
    kept: int = 0


class ModelRequestData(Contract):
    prefix_sha256: str
    prompt_tokens: int  # text tokens plus image_tokens
    shared_prefix_tokens: int
    encoding: str
    message_count: int
    image_tokens: int = 0  # the request's images by OpenAI's formula for the model (shared/media/image_tokens.py)
    # What the API itself reported (README "Models"). `cached_tokens` is the provider's prompt-cache hit.
    api: Literal["responses", "chat"] = "chat"
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0  # input tokens written to the prompt cache, when the API reports it
    attempts: int = 1
    # How the call ended, as its usage row says (docs/costs.md): `failed` after its last attempt failed
    # (each failed attempt before it has its own row), `aborted` when an abort cut it.
    attempt: Literal["ok", "failed", "aborted"] = "ok"


class ReasoningUpdateData(Contract):
    """`reasoning_update`: reasoning summary text as the model streams it (Responses API only; only
    when the request asked for summaries, reference §1.12-1.13). A progress event like a text
    `message_update`: the summary is in the transcript with its assistant message (a `thinking` part)
    once the reply is complete; a `message_update` with `restart` voids what streamed before it."""

    delta: str
    item_id: str = ""  # the reasoning item the text belongs to
    summary_index: int = Field(0, ge=0)  # the summary part within that item (parts read as paragraphs)


class ToolCallProgressData(Contract):
    """`tool_call_progress`: the arguments of a tool call the model is still writing (a large `write`
    streams for a while). Throttled: at most one per call per read, after every KiB or so; the call
    itself is in the transcript once the reply is complete."""

    tool_call_id: str
    tool_name: str
    bytes: int = Field(ge=0)  # argument bytes streamed so far


class UiUpdateData(Contract):
    """`ui_update`: what changed in SessionUIState, as one Yjs V1 update (base64), not the document.
    A client applies it to the document it seeded from `GET /ui` (subscribe first, then fetch: Yjs
    updates are idempotent, so an update seen twice is harmless). Missed events (a gap in the stream)
    leave the client's document behind: it fetches `GET /ui` again and merges it."""

    update: str


class ChecklistStepData(Contract):
    id: str
    title: str
    kind: Literal["required", "verification", "optional"]
    status: Literal["done", "pending", "skipped"]


class ChecklistData(Contract):
    """`checklist`: where the agent is in an active workflow (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools"). `current` is the 1-based
    step it is on (the first audited step still pending; total + 1 when none is left); `done` counts
    done steps. Sent when a step's status changes, after a wake and after a compaction."""

    workflow: str
    current: int
    total: int
    done: int
    steps: list[ChecklistStepData]


class AuditData(Contract):
    """`audit`: a completion audit's outcome (the transcript's `audit` entry)."""

    workflow: str
    outcome: Literal["passed", "blocked", "deviations_reported", "deviations_unreported", "superseded"]
    missing: list[str]
    tool_call_id: str
    deviations: list[dict[str, str]] = []  # {step, cause}, as the completion message declared them
