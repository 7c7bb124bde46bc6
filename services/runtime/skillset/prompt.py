"""The system prompt: one static prefix for every session, plus a few append-only variants.

Prompt caching reuses exact prefixes, so the prefix is built only from the text files in `prompts/`
and the skill catalog, in a fixed order, with no per-session values (no dates, ids or user data).
A variant (one per session type, so sessions of a type share a cached prefix) appends preloaded skill bodies after that prefix and never changes
a byte before it. The prompt never changes during a session: other skills load through the `skill`
tool as tool results.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Literal, get_args

from services.runtime.skillset.skills import Skill, UnknownSkill, catalog_block, required_closure
from shared.trust.trusted_blocks import Trusted, element

Variant = Literal["base", "deck-generation", "import"]
VARIANTS: tuple[Variant, ...] = get_args(Variant)
PROMPTS_DIR = Path(__file__).resolve().parents[1] / "prompts"

# Section order of the static prefix (fixed: reordering changes every byte after the change).
SECTIONS: tuple[str, ...] = (
    "identity", "vocabulary", "interface", "security", "precedence", "injections", "blocks", "transport",
    "skills", "knowledge", "tasks", "yield", "completion",
)
# The workflow skill each variant preloads; its required reference skills come with it.
VARIANT_SKILL: dict[Variant, str | None] = {
    "base": None,
    "deck-generation": "deck-generation",
    "import": "import",
}


@cache
def prompt_text(name: str) -> str:
    """One file of `prompts/`, without trailing whitespace (the joins below own the separators)."""
    return (PROMPTS_DIR / f"{name}.txt").read_text(encoding="utf-8").rstrip()


def skill_intro(skill: Skill) -> str:
    """The preload instruction: the skill type, not the loading method, selects the contract."""
    return prompt_text("preloaded_workflow" if skill.type == "workflow" else "preloaded_reference")


def skill_block(skill: Skill, intro: str | None = None) -> Trusted:
    """A skill body wrapped with its identity, as preloaded (and usable for the skill tool's result),
    followed by its audited steps' ids when it has a checklist: a deviation names a step by its id,
    and the body is all the agent reads of the skill (the checklist file is the harness's)."""
    intro = intro if intro is not None else skill_intro(skill)
    return element("skill", {"name": skill.name, "type": skill.type, "path": skill.path},
                   f"{intro}\n\n{skill.body.rstrip()}{checklist_ids(skill)}")


def checklist_ids(skill: Skill) -> str:
    """The audited steps of a workflow, by id (skills/*/checklist.yaml; shared/ui/checklist.py)."""
    checklist = skill.manifest.checklist
    if checklist is None:
        return ""
    steps = "\n".join(f"- `{s.id}`: {s.title}" + ("" if s.audited else " (optional)") for s in checklist.steps)
    return ("\n\n## Audited steps (ids)\n\nThe completion audit checks these steps. A step you skip on "
            "purpose goes in message_user's `deviations` as {step: its id, cause: why}.\n\n" + steps)


def static_prefix(skills: Mapping[str, Skill]) -> str:
    """The prefix shared by every session and variant: identical bytes for identical skill sets."""
    sections = [prompt_text(name) for name in SECTIONS]
    sections.append(prompt_text("catalog") + "\n\n" + catalog_block(skills))
    return "\n\n".join(sections) + "\n"


def preloaded_skills(variant: Variant, skills: Mapping[str, Skill]) -> list[Skill]:
    """The skills a variant preloads, in prompt order, so the runtime can record their activations."""
    if variant not in VARIANT_SKILL:
        raise ValueError(f"unknown prompt variant {variant!r}; expected one of {', '.join(VARIANTS)}")
    workflow = VARIANT_SKILL[variant]
    if workflow is None:
        return []
    if workflow not in skills:
        raise UnknownSkill(f"variant {variant!r} needs skill {workflow!r}, which is not in the catalog")
    return required_closure([workflow], skills)


def build_system_prompt(variant: Variant, skills: Mapping[str, Skill]) -> str:
    """Base is the static prefix; the other variants append their preloaded skills after it."""
    prefix = static_prefix(skills)
    preloaded = preloaded_skills(variant, skills)
    if not preloaded:
        return prefix
    blocks = [prompt_text("preloaded"), *(skill_block(s).text for s in preloaded)]
    return prefix + "\n" + "\n\n".join(blocks) + "\n"
