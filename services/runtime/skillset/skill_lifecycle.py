"""Skill contracts with a lifecycle (docs/architecture.md "Skill contracts"): when an activation ends.

- A workflow ends at the audited completion of its task: the blocking `message_user` that yields
  after a `passed` or `deviations_reported` audit (services/runtime/skillset/audit.py) — reason `completed`.
- A live workflow whose task completed (a final audit after its activation, e.g.
  `deviations_unreported`) ends when the agent activates another workflow — reason `superseded`.
- A live workflow from an earlier user request (activated before the newest user prompt: a
  preloaded one with no work done, or one left mid-task) ends when the agent activates a workflow
  that conflicts with it — reason `superseded`: the user asked for something else, and a user can
  always start a different task.
- A live workflow that an activating workflow outranks (its manifest's `metadata.precedence-over`,
  services/runtime/skillset/skills.py "Precedence") ends — reason `superseded` — whenever it started: the
  manifests resolve the conflict before the task runs. Within one request, a conflict that no
  manifest ranks is still refused (the agent asks the user).
- A workflow superseded before its task completed gets a completion audit with outcome `superseded`
  (its steps as they stood), so the ended contract is visible in the audit trail too.
- The references that came with an ending workflow (in its manifest's required closure, activated
  with it or after it) end with it — reason `with_workflow` — unless a workflow that stays or starts
  requires them too. A reference loaded on its own (not required, or activated before the workflow)
  does not end: it is restored after every compaction.

Each end is a `skill_end` transcript entry and a `skill_ended` event; the live set is derived from the
transcript alone (`Transcript.active_skills`), so a wake or a compaction sees the same contracts.
Conflicts are checked among live activations, minus those the incoming workflow supersedes (`scope`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from services.runtime.live.events import Outbox
from services.runtime.skillset.skills import Skill, outranks, required_closure
from services.runtime.store.transcript import Transcript, now_iso
from shared.contracts.records.transcript import (
    AuditEntry,
    MessageEntry,
    SkillActivationEntry,
    SkillEndEntry,
    SkillEndReason,
    TranscriptEntry,
)


@dataclass(frozen=True)
class SkillEnd:
    name: str
    reason: SkillEndReason
    workflow: str | None = None


def closure_names(names: Iterable[str], skills: Mapping[str, Skill]) -> set[str]:
    return {s.name for s in required_closure([n for n in names if n in skills], skills)}


def completed_workflows(entries: Sequence[TranscriptEntry], live: Sequence[SkillActivationEntry]) -> set[str]:
    """Live workflows with a final (yielding) completion audit after their activation."""
    started = {a.id for a in live if a.skill_type == "workflow"}
    open_: set[str] = set()
    done: set[str] = set()
    for e in entries:
        if isinstance(e, SkillActivationEntry) and e.id in started:
            open_.add(e.name)
        elif isinstance(e, AuditEntry) and e.workflow in open_ and e.outcome != "blocked":
            done.add(e.workflow)
    return done


def earlier_requests(entries: Sequence[TranscriptEntry], live: Sequence[SkillActivationEntry]) -> set[str]:
    """Live workflows activated before the newest user prompt: the work of an earlier request."""
    last_prompt = max((i for i, e in enumerate(entries) if isinstance(e, MessageEntry)
                       and e.message.role == "user"), default=-1)
    where = {e.id: i for i, e in enumerate(entries) if isinstance(e, SkillActivationEntry)}
    return {a.name for a in live if a.skill_type == "workflow" and where.get(a.id, len(entries)) < last_prompt}


def conflicting(incoming: Iterable[str], name: str, skills: Mapping[str, Skill]) -> bool:
    """`name` and one of `incoming` declare a conflict, in either direction."""
    theirs = set(skills[name].manifest.conflicts_with) if name in skills else set()
    return any(n in theirs or name in skills[n].manifest.conflicts_with for n in incoming if n in skills)


def ends_for(workflows: Sequence[str], live: Sequence[SkillActivationEntry], skills: Mapping[str, Skill],
             keep: Iterable[str], reason: SkillEndReason, by: str | None = None) -> list[SkillEnd]:
    """The ending workflows, then the live references that came with them (required by one and
    activated with it or after it) and that nothing in `keep` requires."""
    kept = closure_names(keep, skills)
    position = {a.name: i for i, a in enumerate(live)}  # `live` is in activation order
    out = [SkillEnd(w, reason, by) for w in workflows]
    for i, a in enumerate(live):
        if a.skill_type != "reference" or a.name in kept:
            continue
        owner = next((w for w in workflows if a.name in closure_names([w], skills) and position.get(w, i) <= i), None)
        if owner is not None:
            out.append(SkillEnd(a.name, "with_workflow", owner))
    return out


def superseded(incoming: Iterable[str], live: Sequence[SkillActivationEntry], completed: set[str],
               skills: Mapping[str, Skill], earlier: set[str] | None = None) -> list[SkillEnd]:
    """What ends when `incoming` skills activate: nothing, unless they bring a workflow; then every
    completed live workflow they do not include, and every workflow of an earlier request (`earlier`)
    that conflicts with them, each with its references."""
    closure = closure_names(incoming, skills)
    starting = [n for n in closure if skills[n].type == "workflow"]
    if not starting:
        return []
    stale = {n for n in earlier or set() if conflicting(closure, n, skills)}
    ranked = {a.name for a in live if any(outranks(w, a.name, skills) for w in starting)}
    ending = [a.name for a in live if a.skill_type == "workflow" and a.name not in closure
              and (a.name in completed or a.name in stale or a.name in ranked)]
    staying = [a.name for a in live if a.skill_type == "workflow" and a.name not in ending]
    return ends_for(ending, live, skills, [*staying, *closure], "superseded", sorted(starting)[0])


def completion_ends(finished: Sequence[str], live: Sequence[SkillActivationEntry],
                    skills: Mapping[str, Skill]) -> list[SkillEnd]:
    """What ends at an audited completion of the `finished` workflows."""
    names = {a.name for a in live}
    ending = [w for w in finished if w in names]
    staying = [a.name for a in live if a.skill_type == "workflow" and a.name not in ending]
    return ends_for(ending, live, skills, staying, "completed")


def scope(incoming: Iterable[str], transcript: Transcript, skills: Mapping[str, Skill]) -> set[str]:
    """The live skill names a conflict check of `incoming` runs against."""
    live = transcript.active_skills()
    entries = transcript.entries
    gone = {e.name for e in superseded(incoming, live, completed_workflows(entries, live), skills,
                                       earlier_requests(entries, live))}
    return {a.name for a in live} - gone


class SkillContracts:
    """Records activations and their ends (transcript entry first, then the event)."""

    def __init__(self, transcript: Transcript, skills: Mapping[str, Skill], outbox: Outbox) -> None:
        self.transcript = transcript
        self.skills = skills
        self.outbox = outbox
        # (workflow, superseding workflow) -> records its `superseded` audit (services/runtime/skillset/audit.py);
        # set by the session once its auditor exists (the auditor depends on these contracts).
        self.audit_superseded: Callable[[str, str | None], Awaitable[None]] | None = None

    def names(self) -> set[str]:
        return {a.name for a in self.transcript.active_skills()}

    def scope(self, incoming: Iterable[str]) -> set[str]:
        return scope(incoming, self.transcript, self.skills)

    async def activate(self, skill: Skill, required_by: str | None) -> None:
        """Ends what the skill supersedes, then records it active."""
        live = self.transcript.active_skills()
        entries = self.transcript.entries
        done = completed_workflows(entries, live)
        ends = superseded([skill.name], live, done, self.skills, earlier_requests(entries, live))
        for e in ends:  # a task cut short, not one completed: its audit says so before its end
            if e.reason == "superseded" and e.name not in done and self.audit_superseded is not None:
                await self.audit_superseded(e.name, e.workflow)
        await self.end(ends)
        await self.transcript.append_skill(skill.name, skill.type, required_by)
        await self.outbox.event("skill_activated", {"name": skill.name, "type": skill.type, "requiredBy": required_by})

    async def complete(self, workflows: Sequence[str]) -> None:
        """The audited completion of these workflows' task yields: their contracts end."""
        await self.end(completion_ends(workflows, self.transcript.active_skills(), self.skills))

    async def end(self, ends: Sequence[SkillEnd]) -> None:
        t = self.transcript
        for e in ends:
            await t.append_entry(SkillEndEntry(id=t.new_id(), parent_id=t.leaf_id, timestamp=now_iso(), name=e.name,
                                               reason=e.reason, workflow=e.workflow))
            await self.outbox.event("skill_ended", {"name": e.name, "reason": e.reason, "workflow": e.workflow})
