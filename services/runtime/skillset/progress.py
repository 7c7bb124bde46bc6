"""Checklist progress (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools"): which step of each active workflow the agent is on, for clients
(`checklist` events) and for the model after a compaction (a `<checklist_progress>` anchor).

Computed from the transcript and the todo list with the audit's rules (services/runtime/skillset/audit.py,
shared/ui/checklist.py), so it needs no state of its own: a wake or a compaction recomputes it and
publishes it again. Only live workflows have progress: an audited completion ends the contract
(services/runtime/skillset/skill_lifecycle.py). A workflow whose task completed while it stays live (a
`deviations_unreported` audit) shows the last audited task's steps until new work on it starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.runtime.live.events import Outbox
from services.runtime.skillset.audit import active_checklists, engaged, workflow_window
from services.runtime.skillset.skills import Skill
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from shared.contracts.records.messages import CustomMessage
from shared.contracts.records.transcript import AuditEntry
from shared.contracts.streams.events import ChecklistData, ChecklistStepData
from shared.trust.trusted_blocks import render
from shared.ui.checklist import Checklist, current_index, evaluate, tool_calls

ANCHOR_TYPE = "gamma.checklist_progress"


class ChecklistProgress:
    def __init__(self, transcript: Transcript, todo: TodoController, skills: Mapping[str, Skill],
                 outbox: Outbox) -> None:
        self.transcript = transcript
        self.todo = todo
        self.skills = skills
        self.outbox = outbox
        self._sent: dict[str, dict[str, Any]] = {}

    def _steps(self, name: str, checklist: Checklist) -> list[ChecklistStepData]:
        entries = self.transcript.entries
        start = workflow_window(entries, name)
        window = entries[start:]
        statuses = evaluate(checklist, tool_calls(window), self.todo.current.items)
        if start > 0 and not engaged(window, name, checklist, statuses):
            last = entries[start - 1]
            if isinstance(last, AuditEntry) and last.workflow == name and last.steps:
                return [ChecklistStepData(id=s.id, title=s.title, kind=s.kind, status=s.status) for s in last.steps]
        return [ChecklistStepData(id=s.id, title=s.title, kind=s.kind, status=s.status) for s in statuses]

    def snapshot(self) -> list[ChecklistData]:
        out = []
        for name, checklist in active_checklists(self.transcript, self.skills):
            steps = self._steps(name, checklist)
            out.append(ChecklistData(workflow=name, current=current_index(steps),
                                     total=len(steps), done=sum(s.status == "done" for s in steps), steps=steps))
        return out

    async def publish(self, force: bool = False) -> None:
        """A `checklist` event per active workflow whose progress changed (all of them with `force`)."""
        for data in self.snapshot():
            dumped = data.model_dump()
            if force or self._sent.get(data.workflow) != dumped:
                self._sent[data.workflow] = dumped
                await self.outbox.event("checklist", dumped)

    def anchor(self) -> CustomMessage | None:
        """Restored after a compaction with the active skills: the done and remaining steps."""
        snaps = self.snapshot()
        if not snaps:
            return None
        blocks = [render("checklist_progress", {"workflow": d.workflow, "step": min(d.current, d.total), "of": d.total,
                                                "done": d.done},
                         "\n".join(f"- [{s.status}] {s.id}: {s.title}" for s in d.steps)) for d in snaps]
        return CustomMessage(custom_type=ANCHOR_TYPE, content="\n".join(blocks), display=False,
                             details={"trusted": True, "injectionType": "checklist_progress", "source": "system"})
