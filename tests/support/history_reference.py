"""The full-read path a wake used before the transcript index (every line parsed, the tree built over
all of them), as the reference the index's window, facts and branches are compared against
(tests/unit/test_transcript_index.py, tests/integration/test_transcript_index_crash.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.runtime.store.transcript import Transcript, read_entries
from services.runtime.ui.costs import usage_by_model
from shared.contracts.records.messages import AgentMessage
from shared.contracts.records.transcript import (
    LeafEntry,
    SkillActivationEntry,
    SkillEndEntry,
    TranscriptEntry,
)
from shared.history.context import build_context
from shared.history.transcript_index import Facts
from shared.history.transcript_tree import active_path


@dataclass
class Reference:
    entries: list[TranscriptEntry]  # every entry, file order
    active: list[TranscriptEntry]
    context: list[AgentMessage]
    skills: list[str]  # ids of the live activations, in order
    facts: Facts
    leaf: str | None


def reference(path: Path) -> Reference:
    entries = read_entries(path)
    active = active_path(entries)
    live: dict[str, SkillActivationEntry] = {}
    for e in active:
        if isinstance(e, SkillActivationEntry):
            live.setdefault(e.name, e)
        elif isinstance(e, SkillEndEntry):
            live.pop(e.name, None)
    facts = Facts()
    for e in entries:
        facts.fold(e.model_dump(mode="json", by_alias=True, exclude_none=True))
    last = active[-1] if active else None
    leaf = (last.target_id if isinstance(last, LeafEntry) else last.id) if last is not None else None
    return Reference(entries, active, build_context(active), [a.id for a in live.values()], facts, leaf)


def assert_same(t: Transcript, ref: Reference) -> None:
    """What a wake restores equals what the full read gave."""
    assert t.leaf_id == ref.leaf
    assert t.context() == ref.context
    assert [a.id for a in t.active_skills()] == ref.skills
    assert_knows(t, ref.facts)
    assert t.told == ref.facts.told
    assert list(usage_by_model(t.entries, t.w.base_usage).items()) == list(usage_by_model(ref.active).items())
    # the window is the active branch's tail, in order
    ids = [e.id for e in ref.active]
    window = [e.id for e in t.entries]
    assert window == ids[len(ids) - len(window):]


def assert_knows(t: Transcript, facts: Facts) -> None:
    """Every id of the file is known, with the entry that recorded it, from the index's ids or the ids
    file (shared/history/transcript_ids.py), and one never recorded is not."""
    assert all(t.prompts.get(p) == e for p, e in facts.prompts.items())
    assert all(t.sources.get(s) == e for s, e in facts.sources.items())
    assert all(c in t.compactions for c in facts.compactions)
    assert "never-sent" not in t.prompts and ("client", "never-sent") not in t.sources
