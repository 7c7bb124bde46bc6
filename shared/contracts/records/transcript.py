"""`sessions/{sid}/transcript.jsonl`: Pi's session entries (id/parentId tree), written only by the runtime."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, field_validator

from shared.contracts.base import CamelContract
from shared.contracts.records.messages import AgentMessage


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


SkillEndReason = Literal["completed", "superseded", "with_workflow"]


class SkillEndEntry(_Entry):
    """A skill activation ended (docs/architecture.md "Skill contracts"): `completed` at the audited
    completion of its workflow, `superseded` when another workflow's activation ended it (this one's
    task was complete, was an earlier request's, or the other outranks it), `with_workflow` for a reference that `workflow` required. An ended skill is no
    longer active: not restored, not in conflict checks; activating it again starts a new contract."""

    type: Literal["skill_end"] = "skill_end"
    name: str
    reason: SkillEndReason
    workflow: str | None = None  # with_workflow: the workflow it followed; superseded: the one activated


class CompactionEntry(_Entry):
    type: Literal["compaction"] = "compaction"
    summary: str
    first_kept_entry_id: str
    tokens_before: int = 0
    details: dict[str, Any] = Field(default_factory=dict)
    request_id: str | None = None


class AuditStep(CamelContract):
    """One checklist step as a completion audit saw it (shared/ui/checklist.py)."""

    id: str
    title: str
    kind: Literal["required", "verification", "optional"]
    status: Literal["done", "pending", "skipped"]


MAX_DEVIATIONS = 50
MAX_DEVIATION_CAUSE = 1000


class Deviation(CamelContract):
    """One workflow step the agent did not do, and why (`message_user`'s `deviations`): `step` is a step
    id of the active workflow's checklist (shared/ui/checklist.py)."""

    step: str = Field(min_length=1, max_length=64)
    cause: str = Field(min_length=1, max_length=MAX_DEVIATION_CAUSE)

    @field_validator("cause")
    @classmethod
    def _said(cls, v: str) -> str:
        if not v.strip():  # a deviation says why: blank is no cause (the audit would not count it)
            raise ValueError("the cause says why the step was skipped; it cannot be blank")
        return v


AuditOutcome = Literal["passed", "blocked", "deviations_reported", "deviations_unreported", "superseded"]


class AuditEntry(_Entry):
    """A completion audit (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools"): a blocking message_user checked against an active workflow's
    checklist. `blocked`: steps were missing the first time, the message was refused with an error
    naming them; later completions yield and say whether the message reported each deviation.
    `superseded`: another workflow ended this one's contract before its task completed (its steps as
    they stood; `tool_call_id` empty, no message was checked; services/runtime/skillset/skill_lifecycle.py).
    Not a model message: replay (shared/history/context.py) skips it; the model saw the tool result."""

    type: Literal["audit"] = "audit"
    workflow: str
    outcome: AuditOutcome
    tool_call_id: str
    missing: list[str] = Field(default_factory=list)
    steps: list[AuditStep] = Field(default_factory=list)
    deviations: list[Deviation] = Field(default_factory=list)  # as the completion message declared them


class ModelChangeEntry(_Entry):
    """The session's model changed here (PATCH /sessions/{id}): the calls after it use `model_id`."""

    type: Literal["model_change"] = "model_change"
    provider: str = "openai"
    model_id: str
    reasoning_effort: str | None = None  # None: the model's default effort
    api: Literal["responses", "chat"] | None = None


class HistoryRepairEntry(_Entry):
    """The model API refused a replayed item and the runtime repaired the history (shared/history/history_repair.py;
    docs/architecture.md "Model calls: retries and recovery"): every replay applies `action` to the
    message entries `target_ids` names, or to every message before this entry when it names none."""

    type: Literal["history_repair"] = "history_repair"
    action: Literal["strip_reasoning", "remove_images", "redact"]
    target_ids: list[str] = Field(default_factory=list, max_length=10_000)
    error: str = Field("", max_length=2000)  # what the API said (shown to the user and the inspector)


class LeafEntry(_Entry):
    """A move of the active branch's leaf (Pi's tree navigation; docs/architecture.md "Snapshots,
    rewind and fork"): not a node of the tree (no parent, no children); the next entry written hangs
    under `target_id`. `note` is the trusted text the model reads at that point of the branch."""

    type: Literal["leaf"] = "leaf"
    target_id: str
    from_id: str | None = None  # the leaf it moved away from
    reason: Literal["rewind", "edit", "switch"] = "rewind"
    note: str = ""


TranscriptEntry = Annotated[
    SessionHeader | MessageEntry | CustomMessageEntry | SkillActivationEntry | SkillEndEntry | CompactionEntry
    | ModelChangeEntry | AuditEntry | LeafEntry | HistoryRepairEntry,
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
