"""Completion audits (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools"): before a blocking `message_user` that completes a task while a workflow
skill is active, its checklist (shared/ui/checklist.py) is checked against the transcript.

Rules (README "Completion audits"):
- a blocking message is a completion unless a todo task is `blocked` (the agent waits for an answer:
  ask-user-questions marks its task blocked before it asks);
- a workflow is audited over its window: from its activation, or from its last final audit (a task
  done), on; it is audited only when the window shows work on it (`engaged`: the agent loaded the
  skill there, or in its first task a step is done), so a later unrelated answer, another
  workflow's task, or a greeting in a session that preloads the workflow is not held to it;
- the message's `deviations` ({step, cause}, message_user's argument) are read, never its text: when
  they name every missing step the message yields (`deviations_reported`);
- otherwise, the first time audited steps are missing, the message is refused: an error result names
  each missing step, nothing reaches the user, and the run continues (outcome `blocked`);
- after that the message yields as `deviations_unreported`. Never refused twice, so a step that is
  truly impossible cannot trap the agent.
- a message that yields after a `passed` or `deviations_reported` audit ends that workflow's
  contract (services/runtime/skillset/skill_lifecycle.py);
- a workflow whose contract another workflow ends before its task completed is audited `superseded`
  (its steps as they stood, nothing refused).
Every audit is a transcript entry (`AuditEntry`), an `audit` event, and a count in
`gamma_completion_audits_total{workflow, outcome}`.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from services.runtime.live.events import Outbox
from services.runtime.skillset.skill_lifecycle import SkillContracts
from services.runtime.skillset.skills import Skill
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript, now_iso
from shared.contracts.records.messages import AssistantMessage, ToolCall
from shared.contracts.records.transcript import (
    AuditEntry,
    AuditOutcome,
    AuditStep,
    Deviation,
    MessageEntry,
    SkillActivationEntry,
    TranscriptEntry,
)
from shared.contracts.streams.events import AuditData
from shared.ui.checklist import Checklist, StepStatus, evaluate, missing, tool_calls

_COUNTERS: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def audit_counter(registry: CollectorRegistry) -> Counter:
    found = _COUNTERS.get(registry)
    if found is None:
        found = Counter("gamma_completion_audits", "Completion audits of workflow checklists, by outcome",
                        ["workflow", "outcome"], registry=registry)
        _COUNTERS[registry] = found
    return found


def workflow_window(entries: Sequence[TranscriptEntry], name: str) -> int:
    """Index where the workflow's current task starts: its latest activation (the live one), or just
    after its last final audit (a completion that yielded), whichever is later; len(entries) when
    never active."""
    start = len(entries)
    for i in range(len(entries) - 1, -1, -1):
        e = entries[i]
        if isinstance(e, SkillActivationEntry) and e.name == name:
            start = i
            break
    for i in range(len(entries) - 1, start, -1):
        e = entries[i]
        if isinstance(e, AuditEntry) and e.workflow == name and e.outcome != "blocked":
            return i + 1
    return start


def _loaded_in(entries: Sequence[TranscriptEntry], name: str) -> bool:
    """Loaded by the agent (a `skill` call, or an activation it caused) in these entries; a preload at
    session start alone is not work on a task (a greeting in a deck variant is not a deck)."""
    for e in entries:
        if isinstance(e, SkillActivationEntry) and e.name == name and not e.preloaded:
            return True
        if isinstance(e, MessageEntry) and isinstance(e.message, AssistantMessage) and any(
                isinstance(c, ToolCall) and c.name == "skill" and c.arguments.get("name") == name
                for c in e.message.content):
            return True
    return False


def engaged(window: Sequence[TranscriptEntry], name: str, checklist: Checklist,
            statuses: Sequence[StepStatus]) -> bool:
    """Work on this workflow in its window: the agent loaded it there; or, in its first task (the window
    starts at its activation, e.g. a preload), a step shown by a tool call is done. After a finished
    task the agent must load the workflow again to start another: another workflow's tool calls (an
    edit also runs `gml validate`) or a todo list left complete are not work on this one."""
    if _loaded_in(window, name):
        return True
    first_task = bool(window) and isinstance(window[0], SkillActivationEntry) and window[0].name == name
    by_tool = {s.id for s in checklist.steps if s.evidence.tool is not None}
    return first_task and any(s.status == "done" and s.id in by_tool for s in statuses)


def reported(deviations: Sequence[Deviation], steps: Sequence[StepStatus]) -> bool:
    """The declared deviations name every missing step by its id, each with a cause."""
    declared = {d.step for d in deviations if d.cause.strip()}
    return all(s.id in declared for s in steps)


def refusal_text(workflow: str, steps: Sequence[StepStatus]) -> str:
    lines = [f"Completion audit: the active workflow '{workflow}' has required steps that the transcript does "
             "not show done. Your message was NOT delivered:"]
    lines += [f"- {s.id}: {s.title} ({s.kind}, {s.status})" for s in steps]
    lines.append("Do each missing step now, then call message_user again. If a step cannot be done (an "
                 "unrecoverable error), call message_user with deviations: [{step, cause}] naming each step "
                 "id above and its cause.")
    return "\n".join(lines)


@dataclass
class AuditResult:
    workflow: str
    outcome: AuditOutcome
    missing: list[StepStatus]
    steps: list[StepStatus]


def active_checklists(transcript: Transcript, skills: Mapping[str, Skill]) -> list[tuple[str, Checklist]]:
    """The active workflow skills that declare a checklist, in activation order (audits and progress)."""
    out = []
    for a in transcript.active_skills():
        skill = skills.get(a.name)
        if skill is not None and skill.type == "workflow" and skill.manifest.checklist is not None:
            out.append((skill.name, skill.manifest.checklist))
    return out


class Auditor:
    def __init__(self, transcript: Transcript, todo: TodoController, skills: Mapping[str, Skill],
                 outbox: Outbox, registry: CollectorRegistry | None, contracts: SkillContracts) -> None:
        self.transcript = transcript
        self.contracts = contracts
        self.todo = todo
        self.skills = skills
        self.outbox = outbox
        self.registry = registry
        contracts.audit_superseded = self.superseded

    def checklists(self) -> list[tuple[str, Checklist]]:
        return active_checklists(self.transcript, self.skills)

    def judge(self, name: str, checklist: Checklist, deviations: Sequence[Deviation]) -> AuditResult | None:
        entries = self.transcript.entries
        window = entries[workflow_window(entries, name):]
        statuses = evaluate(checklist, tool_calls(window), self.todo.current.items)
        if not engaged(window, name, checklist, statuses):
            return None  # no work on this workflow since its last task: not this workflow's completion
        gaps = missing(statuses)
        refused_before = any(isinstance(e, AuditEntry) and e.workflow == name and e.outcome == "blocked"
                             for e in window)
        outcome: AuditOutcome = ("passed" if not gaps else
                                 "deviations_reported" if reported(deviations, gaps) else
                                 "blocked" if not refused_before else "deviations_unreported")
        return AuditResult(name, outcome, gaps, statuses)

    async def check(self, message: str, deviations: Sequence[Deviation], tool_call_id: str) -> str | None:
        """Before a blocking message_user: None to deliver it, or the error text that replaces it.
        A delivered completion ends the contracts of the workflows it completed."""
        if any(i.status == "blocked" for i in self.todo.current.items):
            return None  # waiting on the user, not completing
        refusals, finished = [], []
        for name, checklist in self.checklists():
            result = self.judge(name, checklist, deviations)
            if result is None:
                continue
            await self._record(result, deviations, tool_call_id)
            if result.outcome == "blocked":
                refusals.append(refusal_text(name, result.missing))
            elif result.outcome in ("passed", "deviations_reported"):
                finished.append(name)
        if refusals:
            return "\n\n".join(refusals)
        await self.contracts.complete(finished)
        return None

    async def superseded(self, name: str, by: str | None) -> None:
        """`name`'s contract ends because `by` activated (services/runtime/skillset/skill_lifecycle.py)."""
        skill = self.skills.get(name)
        steps: list[StepStatus] = []
        if skill is not None and skill.manifest.checklist is not None:
            entries = self.transcript.entries
            steps = evaluate(skill.manifest.checklist, tool_calls(entries[workflow_window(entries, name):]),
                             self.todo.current.items)
        await self._record(AuditResult(name, "superseded", missing(steps), steps), [], "")

    async def _record(self, result: AuditResult, deviations: Sequence[Deviation], tool_call_id: str) -> None:
        t = self.transcript
        ids = {s.id for s in result.steps}
        mine = [d for d in deviations if d.step in ids]  # a step of another workflow is that one's
        entry = AuditEntry(id=t.new_id(), parent_id=t.leaf_id, timestamp=now_iso(), workflow=result.workflow,
                           outcome=result.outcome, tool_call_id=tool_call_id, missing=[s.id for s in result.missing],
                           steps=[AuditStep(id=s.id, title=s.title, kind=s.kind, status=s.status) for s in result.steps],
                           deviations=mine)
        await t.append_entry(entry)
        if self.registry is not None:
            audit_counter(self.registry).labels(workflow=result.workflow, outcome=result.outcome).inc()
        data = AuditData(workflow=result.workflow, outcome=result.outcome, missing=entry.missing,
                         tool_call_id=tool_call_id, deviations=[d.model_dump() for d in mine])
        await self.outbox.event("audit", data.model_dump())
