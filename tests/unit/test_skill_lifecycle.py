"""Skill contracts with a lifecycle (services/runtime/skillset/skill_lifecycle.py, docs/architecture.md "Skill
contracts"): on a real transcript file with the shipped skills, each rule as a test."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime.skillset.skill_lifecycle import SkillContracts
from services.runtime.skillset.skills import SkillConflict, load_skills, resolve_activation
from services.runtime.store.transcript import Transcript, now_iso
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.transcript import AuditEntry, AuditOutcome, SkillEndEntry
from tests.unit.runtime_fakes import FakeOutbox

SKILLS = load_skills(Path(__file__).resolve().parents[2] / "skills")
DECK = ("deck-generation", "gml-authoring", "gml-cli")


async def _no_guard() -> None:
    return None


def contracts(tmp_path: Path) -> tuple[SkillContracts, FakeOutbox]:
    outbox = FakeOutbox()
    return SkillContracts(Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(_no_guard)), SKILLS, outbox), outbox


async def activate(c: SkillContracts, *names: str) -> None:
    for n in names:
        await c.activate(SKILLS[n], None)


async def audit(c: SkillContracts, workflow: str, outcome: AuditOutcome) -> None:
    t = c.transcript
    await t.append_entry(AuditEntry(id=t.new_id(), timestamp=now_iso(), workflow=workflow, outcome=outcome,
                                    tool_call_id="c1"))


def ends(c: SkillContracts) -> list[tuple[str, str, str | None]]:
    return [(e.name, e.reason, e.workflow) for e in c.transcript.entries if isinstance(e, SkillEndEntry)]


async def test_an_audited_completion_ends_the_workflow_and_the_references_that_came_with_it(tmp_path: Path) -> None:
    c, outbox = contracts(tmp_path)
    await activate(c, "ask-user-questions", *DECK)  # a reference loaded on its own, then the deck
    await audit(c, "deck-generation", "passed")
    await c.complete(["deck-generation"])
    assert ends(c) == [("deck-generation", "completed", None), ("gml-authoring", "with_workflow", "deck-generation"),
                       ("gml-cli", "with_workflow", "deck-generation")]
    assert c.names() == {"ask-user-questions"}  # loaded on its own: it stays
    assert [d["name"] for d in outbox.events("skill_ended") if d] == list(DECK)
    # conflicts are checked among live contracts only: the import workflow may start now
    assert [s.name for s in resolve_activation(["import"], SKILLS, c.scope(["import"]))] == [
        "import", "gml-authoring", "gml-cli"]
    # a wake reads the same live set from the file
    again = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(_no_guard))
    assert [a.name for a in again.active_skills()] == ["ask-user-questions"]


async def test_a_reference_loaded_before_its_workflow_stays_when_the_workflow_ends(tmp_path: Path) -> None:
    c, _ = contracts(tmp_path)
    await activate(c, "gml-cli", "deck-generation", "gml-authoring")
    await c.complete(["deck-generation"])
    assert c.names() == {"gml-cli"}


async def test_a_workflow_mid_task_still_conflicts_with_one_it_outranks(tmp_path: Path) -> None:
    c, _ = contracts(tmp_path)
    await activate(c, "import", "gml-authoring", "gml-cli")
    await audit(c, "import", "blocked")  # refused once: the task is not complete
    assert "import" in c.scope(["deck-generation"])
    with pytest.raises(SkillConflict, match="'import' \\(already active\\) takes precedence over 'deck-generation'"
                       ".*do not ask the user"):
        resolve_activation(["deck-generation"], SKILLS, c.scope(["deck-generation"]))


async def test_a_workflow_mid_task_is_superseded_by_one_that_outranks_it(tmp_path: Path) -> None:
    """import's manifest declares precedence over deck-generation: the conflict is resolved, not refused."""
    c, outbox = contracts(tmp_path)
    audited: list[tuple[str, str | None]] = []

    async def record(name: str, by: str | None) -> None:
        audited.append((name, by))

    c.audit_superseded = record
    await activate(c, *DECK)
    await audit(c, "deck-generation", "blocked")
    assert c.scope(["import"]) == {"gml-authoring", "gml-cli"}
    await activate(c, "import")
    assert ends(c) == [("deck-generation", "superseded", "import")]
    assert audited == [("deck-generation", "import")]  # a task cut short is audited before it ends
    assert c.names() == {"gml-authoring", "gml-cli", "import"}
    assert [d["reason"] for d in outbox.events("skill_ended") if d] == ["superseded"]


async def test_a_completed_but_unended_workflow_is_superseded_by_the_next_workflow(tmp_path: Path) -> None:
    c, _ = contracts(tmp_path)
    await activate(c, *DECK)
    await audit(c, "deck-generation", "deviations_unreported")  # yielded without ending its contract
    assert c.names() == set(DECK)
    assert c.scope(["gml-cli"]) == set(DECK)  # a reference alone supersedes nothing
    assert c.scope(["import"]) == {"gml-authoring", "gml-cli"}  # import requires them: they stay
    await activate(c, "import")
    assert ends(c) == [("deck-generation", "superseded", "import")]
    assert c.names() == {"gml-authoring", "gml-cli", "import"}


async def test_an_ended_workflow_activated_again_is_a_new_contract(tmp_path: Path) -> None:
    c, _ = contracts(tmp_path)
    await activate(c, *DECK)
    await c.complete(["deck-generation"])
    await activate(c, *DECK)
    live = c.transcript.active_skills()
    assert [a.name for a in live] == list(DECK)
    assert all(c.transcript.entries.index(a) > c.transcript.entries.index(next(
        e for e in c.transcript.entries if isinstance(e, SkillEndEntry))) for a in live)
