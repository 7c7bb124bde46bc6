"""skill: returns the complete body, records a skill_activation entry, loads requiresSkills
transitively and once. A batch's skill calls are resolved together before any tool runs
(`plan_skill_batch`), so a conflicting set is refused before any other task tool runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.skillset.prompt import skill_block
from services.runtime.skillset.skills import (
    Skill,
    SkillError,
    outranked_in_batch,
    required_by,
    resolve_activation,
)
from services.runtime.tools.ports import SkillHost
from shared.contracts.records.messages import ToolCall
from shared.mcp.tool_schema import ToolArgs
from shared.trust.trusted_blocks import Trusted

SKIPPED = "Skipped: the skill set requested in this batch was refused. Resolve the skill conflict first."


def render_skill(skill: Skill) -> Trusted:
    """The same block a preloaded skill gets: the type selects the contract, not the loading method."""
    return skill_block(skill)


@dataclass
class SkillPlan:
    """Per skill call of one batch: the skills it activates and, for each, the skill that required it."""

    activations: dict[str, list[tuple[Skill, str | None]]] = field(default_factory=dict)
    errors: dict[str, ToolOutcome] = field(default_factory=dict)
    # Calls whose skill another requested skill outranks (services/runtime/skillset/skills.py "Precedence"):
    # answered without activating it.
    outranked: dict[str, ToolOutcome] = field(default_factory=dict)


def outranked_text(name: str, winner: str) -> str:
    return (f"Skill not activated: {name!r} conflicts with {winner!r}, requested in the same batch, and {winner!r} "
            f"takes precedence (its manifest's metadata.precedence-over). Follow {winner!r} for this task.")


def plan_skill_batch(calls: list[ToolCall], skills: Mapping[str, Skill],
                     scope: Callable[[list[str]], set[str]]) -> SkillPlan:
    """`scope(names)`: the live skills these names are checked against (an ended contract is not)."""
    plan = SkillPlan()
    skill_calls = [c for c in calls if c.name == "skill"]
    if not skill_calls:
        return plan
    names = [str(c.arguments.get("name", "")) for c in skill_calls]
    dropped = outranked_in_batch(names, skills)
    try:
        to_activate = resolve_activation(names, skills, scope(names))
        parents = required_by([n for n in names if n not in dropped], skills)
    except SkillError as exc:
        error = ToolOutcome(content=f"Skill activation refused: {exc}", is_error=True)
        for c in calls:
            plan.errors[c.id] = error if c.name == "skill" else ToolOutcome(content=SKIPPED, is_error=True)
        return plan
    assigned: set[str] = set()
    by_name = {s.name: s for s in to_activate}
    for call, name in zip(skill_calls, names, strict=True):
        if name in dropped:
            plan.outranked[call.id] = ToolOutcome(content=outranked_text(name, dropped[name]),
                                                  details={"activated": [], "outrankedBy": dropped[name]})
            continue
        mine: list[tuple[Skill, str | None]] = []
        if name in by_name and name not in assigned:
            mine.append((by_name[name], None))
            assigned.add(name)
        plan.activations[call.id] = mine
    # Required skills go to the call of the skill that first required them (transitively).
    for skill in to_activate:
        if skill.name in assigned:
            continue
        root = skill.name
        while root in parents:
            root = parents[root]
        owner = next((c for c, n in zip(skill_calls, names, strict=True) if n == root),
                     next(c for c in skill_calls if c.id in plan.activations))
        plan.activations[owner.id].append((skill, parents.get(skill.name)))
        assigned.add(skill.name)
    return plan


class SkillArgs(ToolArgs):
    name: str = Field(description="The skill name.")

def skill_tool(host: SkillHost, plans: dict[str, list[tuple[Skill, str | None]]]) -> Tool:
    """`plans` is filled by the batch preflight (call id -> activations)."""

    async def execute(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        name = args["name"]
        if ctx.call.id in plans:
            activations = plans.pop(ctx.call.id)
        else:
            try:
                batch = plan_skill_batch([ctx.call], host.skills, host.skill_scope)
            except SkillError as exc:
                return ToolOutcome(content=str(exc), is_error=True)
            if ctx.call.id in batch.errors:
                return batch.errors[ctx.call.id]
            if ctx.call.id in batch.outranked:
                return batch.outranked[ctx.call.id]
            activations = batch.activations.get(ctx.call.id, [])
        for skill, parent in activations:
            await host.record_activation(skill, parent)
        shown = [s for s, _ in activations]
        if name not in {s.name for s in shown} and name in host.skills:
            shown.insert(0, host.skills[name])  # already active: return its body again, no new activation
        return ToolOutcome(
            content="\n\n".join(render_skill(s).text for s in shown),
            details={"activated": [s.name for s, _ in activations],
                     "requiredBy": {s.name: p for s, p in activations if p}},
        )

    return Tool.typed(
        name="skill",
        description="Load a skill from the available_skills catalog by name. Returns the complete skill body and "
        "records the skill as active; required reference skills load with it. Load every matching skill "
        "in your first tool batch, in parallel.",
        arguments=SkillArgs,
        execute=execute,
    )
