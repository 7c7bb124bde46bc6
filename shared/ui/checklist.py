"""A workflow skill's checklist and how the transcript satisfies it (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools": completion audits,
checklist progress, workflow evaluations share this one reading).

A skill declares its checklist in a file next to its SKILL.md (`metadata.checklist: checklist.yaml`,
see services/runtime/skillset/skills.py). Each step names the evidence that shows it was done:

- `tool` (a tool name, or names joined by `|`; + `args`: argument name -> regular expression, searched in the argument's text; dicts and
  lists are matched against their JSON): a tool call of that name whose result was not an error;
- `todo: complete`: the task list, when it is checked, has tasks and none pending or in progress,
  and the calls include a todo update (a list left complete by an earlier task does not count).

Steps are `required`, `verification` (both audited) or `optional` (shown, never audited). A step is
`done` at the first matching call; a not-done step is `skipped` once a later step is done (the agent
went past it), else `pending`. Everything here is pure: the runtime and the eval runner call it on
transcript entries they read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shared.contracts.records.messages import AssistantMessage, ToolCall, ToolResultMessage
from shared.contracts.records.todo import TodoItem
from shared.contracts.records.transcript import MessageEntry, TranscriptEntry

StepKind = Literal["required", "verification", "optional"]
StepState = Literal["done", "pending", "skipped"]
STEP_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


class Evidence(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    tool: str | None = None
    args: dict[str, str] = Field(default_factory=dict)
    todo: Literal["complete"] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Evidence:
        if (self.tool is None) == (self.todo is None):
            raise ValueError("evidence needs exactly one of 'tool' or 'todo'")
        if self.todo is not None and self.args:
            raise ValueError("'args' goes with 'tool' evidence only")
        for name, pattern in self.args.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"args.{name}: invalid regular expression: {exc}") from exc
        return self


class ChecklistStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    title: str = Field(min_length=1, max_length=200)
    kind: StepKind = "required"
    evidence: Evidence

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not STEP_ID.fullmatch(v):
            raise ValueError(f"{v!r} must be lowercase words joined by hyphens")
        return v

    @property
    def audited(self) -> bool:
        return self.kind != "optional"


class Checklist(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    steps: list[ChecklistStep] = Field(min_length=1, max_length=50)

    @model_validator(mode="after")
    def _unique(self) -> Checklist:
        ids = [s.id for s in self.steps]
        if len(set(ids)) != len(ids):
            raise ValueError("step ids must be unique")
        return self


def parse_checklist(data: Any) -> Checklist:
    """Raises ValueError naming the first bad field."""
    try:
        return Checklist.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        raise ValueError(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg"))) from exc


@dataclass(frozen=True)
class CallRecord:
    """One tool call of the transcript, in order; `ok` once its result came back without an error."""

    index: int
    name: str
    arguments: dict[str, Any]
    ok: bool
    call_id: str = ""


class StepStatus(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    title: str
    kind: StepKind
    status: StepState
    at: int | None = None  # index of the first satisfying call (todo evidence: the last todo call)


def tool_calls(entries: Sequence[TranscriptEntry]) -> list[CallRecord]:
    calls: list[ToolCall] = []
    results: dict[str, bool] = {}
    for e in entries:
        if not isinstance(e, MessageEntry):
            continue
        m = e.message
        if isinstance(m, AssistantMessage):
            calls.extend(c for c in m.content if isinstance(c, ToolCall))
        elif isinstance(m, ToolResultMessage):
            results[m.tool_call_id] = not m.is_error
    return [CallRecord(i, c.name, c.arguments, results.get(c.id, False), c.id) for i, c in enumerate(calls)]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def matches(evidence: Evidence, call: CallRecord) -> bool:
    if evidence.tool is None or call.name not in evidence.tool.split("|") or not call.ok:
        return False
    for name, pattern in evidence.args.items():
        if name not in call.arguments or re.search(pattern, _text(call.arguments[name])) is None:
            return False
    return True


def todo_complete(items: Sequence[TodoItem]) -> bool:
    return bool(items) and all(i.status not in ("pending", "in_progress") for i in items)


def evaluate(checklist: Checklist, calls: Sequence[CallRecord], todo: Sequence[TodoItem]) -> list[StepStatus]:
    found: list[int | None] = []
    last_todo = max((c.index for c in calls if c.name == "todo" and c.ok), default=None)
    for step in checklist.steps:
        ev = step.evidence
        if ev.todo is not None:
            found.append(last_todo if todo_complete(todo) else None)
        else:
            found.append(next((c.index for c in calls if matches(ev, c)), None))
    out: list[StepStatus] = []
    for n, (step, at) in enumerate(zip(checklist.steps, found, strict=True)):
        later = any(f is not None for f in found[n + 1 :])
        state: StepState = "done" if at is not None else "skipped" if later else "pending"
        out.append(StepStatus(id=step.id, title=step.title, kind=step.kind, status=state, at=at))
    return out


def missing(statuses: Sequence[StepStatus]) -> list[StepStatus]:
    """The audited steps (required, verification) not done."""
    return [s for s in statuses if s.kind != "optional" and s.status != "done"]


def in_order(statuses: Sequence[StepStatus], ids: Sequence[str] | None = None) -> bool:
    """The done steps (of `ids`, in that order; default: the checklist's) were first done in order."""
    by_id = {s.id: s for s in statuses}
    wanted = ids if ids is not None else [s.id for s in statuses]
    ats = [by_id[i].at for i in wanted if i in by_id and by_id[i].at is not None]
    return all(a is not None and b is not None and a <= b for a, b in zip(ats, ats[1:], strict=False))


class _Step(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def status(self) -> str: ...


def current_index(statuses: Sequence[_Step]) -> int:
    """1-based number of the step the agent is on: the first audited step still pending (skipped steps
    are behind it); m + 1 when none is left."""
    for n, s in enumerate(statuses, start=1):
        if s.kind != "optional" and s.status == "pending":
            return n
    return len(statuses) + 1
