"""Workflow evaluation scenarios (`evals/*.yaml`) and the checks one run's transcript is judged by.

A scenario names a prompt, the skills that must load in the first tool batch, the required steps in
order (checklist step ids of `workflow`, shared/ui/checklist.py), forbidden actions, the expected yield,
and for the offline scripted model a policy (scripted/workflows.py) that follows or
deliberately skips steps, with what the checks and the completion audit should then find (`expect`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from services.runtime.skillset.skills import Skill
from shared.contracts.records.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from shared.contracts.records.todo import TodoItem
from shared.contracts.records.transcript import AuditEntry, MessageEntry, TranscriptEntry
from shared.ui.checklist import CallRecord, Evidence, evaluate, matches, tool_calls

CHECKS = ("skills_first_batch", "steps_in_order", "no_forbidden", "yield", "audit_clean")


class Scripted(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    policy: str
    skip: list[str] = Field(default_factory=list)
    on_audit: Literal["repair", "explain", "ignore"] = Field("repair", alias="onAudit")


class Expect(BaseModel):
    """What the scripted run should show: a check's expected result (default: passes) and the
    completion audits' outcomes in order (None: not checked)."""

    model_config = ConfigDict(extra="forbid")
    checks: dict[str, bool] = Field(default_factory=dict)
    audits: list[str] | None = None


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str
    description: str = ""
    prompt: str
    setup: list[str] = Field(default_factory=list)  # prompts answered first (e.g. the deck an edit edits)
    workflow: str | None = None
    skills: list[str]
    steps: list[str] = Field(default_factory=list)
    forbidden: list[Evidence] = Field(default_factory=list)
    expect_yield: Literal["complete", "question"] = "complete"
    scripted: Scripted
    expect: Expect = Field(default_factory=Expect)

    def offline_prompt(self) -> str:
        spec = {"policy": self.scripted.policy, "skip": self.scripted.skip, "onAudit": self.scripted.on_audit}
        return f"eval-policy: {json.dumps(spec)}\n{self.prompt}"

    def expected(self, check: str) -> bool:
        return self.expect.checks.get(check, True)


def load_scenarios(directory: Path, skills: dict[str, Skill]) -> list[Scenario]:
    out = []
    for path in sorted(directory.glob("*.yaml")):
        s = Scenario.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        unknown = [n for n in s.skills if n not in skills]
        if s.workflow is not None:
            checklist = skills[s.workflow].manifest.checklist if s.workflow in skills else None
            ids = {st.id for st in checklist.steps} if checklist else set()
            unknown += [f"step {i}" for i in s.steps if i not in ids]
        if unknown:
            raise ValueError(f"{path.name}: unknown {', '.join(unknown)}")
        out.append(s)
    return out


def after_prompt(entries: Sequence[TranscriptEntry], prompt: str) -> list[TranscriptEntry]:
    """The entries from the scenario prompt's user message on (setup prompts come before it)."""
    for i in range(len(entries) - 1, -1, -1):
        e = entries[i]
        if isinstance(e, MessageEntry) and isinstance(e.message, UserMessage):
            content = e.message.content if isinstance(e.message.content, str) else json.dumps(e.message.content)
            if content == prompt:
                return list(entries[i:])
    return []


def yielded(entries: Sequence[TranscriptEntry]) -> bool:
    """The run ended: the last message is a delivered blocking message_user, or plain assistant text."""
    messages = [e.message for e in entries if isinstance(e, MessageEntry)]
    if len(messages) < 2:
        return False
    last = messages[-1]
    if isinstance(last, ToolResultMessage):
        return last.tool_name == "message_user" and not last.is_error and bool((last.details or {}).get("blockOnUser"))
    return isinstance(last, AssistantMessage) and not any(isinstance(c, ToolCall) for c in last.content)


def final_todo(calls: Sequence[CallRecord]) -> list[TodoItem]:
    for c in reversed(calls):
        if c.name == "todo" and c.ok:
            try:
                return [TodoItem.model_validate(i) for i in c.arguments.get("items", [])]
            except ValueError:
                return []
    return []


def judge(s: Scenario, entries: Sequence[TranscriptEntry], skills: dict[str, Skill]) -> dict[str, Any]:
    """One run's checks (name -> passed) plus what they saw."""
    calls = tool_calls(entries)
    assistants = [e.message for e in entries if isinstance(e, MessageEntry) and isinstance(e.message, AssistantMessage)]
    first = [c for c in assistants[0].content if isinstance(c, ToolCall)] if assistants else []
    loaded_first = [str(c.arguments.get("name")) for c in first if c.name == "skill"]
    todo = final_todo(calls)
    steps_ok, order = True, []
    if s.workflow is not None and s.steps:
        checklist = skills[s.workflow].manifest.checklist
        assert checklist is not None
        statuses = {st.id: st for st in evaluate(checklist, calls, todo)}
        order = [(i, statuses[i].at) for i in s.steps]
        ats = [a for _, a in order]
        steps_ok = all(a is not None for a in ats) and ats == sorted(ats)  # type: ignore[type-var]
    forbidden = [c.name for c in calls for f in s.forbidden if matches(f, CallRecord(c.index, c.name, c.arguments, True))]
    blocked = any(i.status == "blocked" for i in todo)
    audits = [e.outcome for e in entries if isinstance(e, AuditEntry)]
    checks = {
        "skills_first_batch": set(s.skills) <= set(loaded_first),
        "steps_in_order": steps_ok,
        "no_forbidden": not forbidden,
        "yield": yielded(entries) and blocked == (s.expect_yield == "question"),
        "audit_clean": all(a == "passed" for a in audits),
    }
    return {"checks": checks, "first_batch_skills": loaded_first, "step_positions": order, "forbidden": forbidden,
            "audits": audits, "tool_calls": len(calls)}


def as_expected(s: Scenario, result: dict[str, Any]) -> bool:
    """A scripted run shows what its policy should make the checks and the audit find."""
    checks_ok = all(result["checks"][c] == s.expected(c) for c in CHECKS)
    return checks_ok and (s.expect.audits is None or result["audits"] == s.expect.audits)
