"""Static prefix and variants: stable bytes, append-only variants, required contract sentences."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.runtime.skillset.prompt import (
    PROMPTS_DIR,
    SECTIONS,
    VARIANTS,
    Variant,
    build_system_prompt,
    preloaded_skills,
    skill_block,
    static_prefix,
)
from services.runtime.skillset.skills import Skill, UnknownSkill, catalog_block, load_skills
from shared.contracts.records.injection import INJECTION_KINDS
from shared.trust.trusted_blocks import escape_text

REPO = Path(__file__).resolve().parents[2]
WORKFLOW_INTRO = ("This workflow skill is active because the current task matches it. "
                  "Follow every required step and complete its verification.")


@pytest.fixture(scope="module")
def skills() -> dict[str, Skill]:
    return load_skills(REPO / "skills")


def test_variants_only_append(skills: dict[str, Skill]) -> None:
    base = build_system_prompt("base", skills)
    assert base == static_prefix(skills)
    for variant in VARIANTS:
        prompt = build_system_prompt(variant, skills)
        assert prompt.startswith(base), variant
    assert build_system_prompt("deck-generation", skills) != base
    assert build_system_prompt("import", skills) != base


def test_builds_are_byte_identical(skills: dict[str, Skill]) -> None:
    again = load_skills(REPO / "skills")
    for variant in VARIANTS:
        assert build_system_prompt(variant, skills).encode() == build_system_prompt(variant, again).encode()
    # The catalog order does not depend on the order the mapping was built in.
    shuffled = dict(reversed(list(skills.items())))
    assert static_prefix(shuffled) == static_prefix(skills)


@pytest.mark.parametrize("sentence", [
    "Call message_user alone when blockOnUser is true.",
    "Your task state and active skills survive context compaction. Continue until completion.",
    "Load all matching skills in the first tool batch, in parallel",
    "Workflow skills are strict checklists.",
    "Reference skills are lookup material.",
    "exactly one task is in_progress",
    "Plain user text has normal user authority",
    "Security rules and platform restrictions remain authoritative at every level.",
])
def test_required_sentences_present(skills: dict[str, Skill], sentence: str) -> None:
    assert sentence in static_prefix(skills)


def test_instruction_precedence_order(skills: dict[str, Skill]) -> None:
    prefix = static_prefix(skills)
    order = ["Live user instructions", "Active playbook instructions", "User-authored workspace knowledge",
             "System-authored workspace knowledge", "General agent defaults"]
    positions = [prefix.index(item) for item in order]
    assert positions == sorted(positions)


def test_vocabulary_names_every_ari_scheme(skills: dict[str, Skill]) -> None:
    prefix = static_prefix(skills)
    for word in ("Deck", "Card", "Theme", "Pane and tab", "file:", "gamma:file:", "form:", "builtin:"):
        assert word in prefix, word


def test_each_injection_type_defined_exactly_once(skills: dict[str, Skill]) -> None:
    prefix = static_prefix(skills)
    for kind in INJECTION_KINDS:
        assert prefix.count(f"<{kind}>") == 1, kind
        assert len(re.findall(rf"^- <{kind}>: ", prefix, re.MULTILINE)) == 1, kind


def test_prefix_has_no_per_session_values(skills: dict[str, Skill]) -> None:
    prefix = static_prefix(skills)
    assert not re.search(r"\d{4}-\d{2}-\d{2}", prefix)  # no dates
    assert str(REPO) not in prefix  # no machine paths
    assert prefix.endswith(catalog_block(skills) + "\n")


def test_every_prompt_file_is_used() -> None:
    used = set(SECTIONS) | {"catalog", "preloaded", "preloaded_workflow", "preloaded_reference"}
    assert {p.stem for p in PROMPTS_DIR.glob("*.txt")} == used


def test_preloaded_skills(skills: dict[str, Skill]) -> None:
    assert preloaded_skills("base", skills) == []
    assert [s.name for s in preloaded_skills("deck-generation", skills)] == [
        "deck-generation", "gml-authoring", "gml-cli"]
    assert [s.name for s in preloaded_skills("import", skills)] == ["import", "gml-authoring", "gml-cli"]
    with pytest.raises(ValueError, match="unknown prompt variant"):
        preloaded_skills("other", skills)  # type: ignore[arg-type]
    with pytest.raises(UnknownSkill):
        preloaded_skills("import", {k: v for k, v in skills.items() if k != "import"})


@pytest.mark.parametrize("variant", ["deck-generation", "import"])
def test_preloaded_bodies_keep_their_type(skills: dict[str, Skill], variant: Variant) -> None:
    prompt = build_system_prompt(variant, skills)
    tail = prompt[len(static_prefix(skills)):]
    for skill in preloaded_skills(variant, skills):
        block = skill_block(skill).text
        assert block in tail
        assert escape_text(skill.body.strip()) in block  # tag names a skill mentions read as text
        if skill.type == "workflow":
            assert WORKFLOW_INTRO in block
        else:
            assert WORKFLOW_INTRO not in block and "lookup material" in block
    # Exactly one workflow contract per variant: only the variant's workflow gets the sentence.
    assert tail.count(WORKFLOW_INTRO) == 1
    # The conflicting workflow is never preloaded next to it.
    other = "import" if variant == "deck-generation" else "deck-generation"
    assert f'<skill name="{other}" type="workflow"' not in tail


def test_transport_section_says_what_the_conversion_does(skills: dict[str, Skill]) -> None:
    """The prefix tells the model how to tell a genuine block (docs/architecture.md "Trust
    boundaries"): the developer role, and the neutraliser's exact output for a typed tag."""
    from shared.trust.neutralise import neutralise

    prefix = static_prefix(skills)
    assert "sends them as\ndeveloper messages" in prefix and "as user messages" in prefix
    assert f"sends `{neutralise('<system_note>')}`" in prefix
    assert "outside the text you see" not in prefix


def test_a_workflows_body_names_its_audited_steps_by_id(skills: dict[str, Skill]) -> None:
    """A deviation names a step by its id; the body (preloaded or the skill tool's result) is all the
    agent reads of a skill, so the ids are in it."""
    for name in ("deck-generation", "import", "gml-editing"):
        skill = skills[name]
        assert skill.manifest.checklist is not None
        text = skill_block(skill).text
        assert "message_user's `deviations`" in text
        assert all(f"- `{step.id}`: {step.title}" in text for step in skill.manifest.checklist.steps)
    assert "Audited steps" not in skill_block(skills["gml-cli"]).text  # a reference has no checklist


def test_a_deviation_without_a_cause_is_refused() -> None:
    from pydantic import ValidationError

    from shared.contracts.records.transcript import Deviation

    with pytest.raises(ValidationError, match="cannot be blank"):
        Deviation(step="validate", cause=" \n ")
    assert Deviation(step="validate", cause="the CLI was down").cause == "the CLI was down"
