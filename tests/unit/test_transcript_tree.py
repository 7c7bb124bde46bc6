"""The transcript tree (shared/history/transcript_tree.py): active branch, leaf moves, legacy linear files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.runtime.store.transcript import Transcript, read_entries
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.messages import UserMessage
from shared.history.transcript_tree import Row, active_path, build, path_to


def node(eid: str, parent: str | None) -> dict[str, Any]:
    return {"type": "message", "id": eid, "parentId": parent}


def move(eid: str, target: str) -> dict[str, Any]:
    return {"type": "leaf", "id": eid, "targetId": target}


def ids(entries: list[dict[str, Any]]) -> list[str]:
    return [e["id"] for e in entries]


def test_a_linear_file_is_its_own_branch() -> None:
    entries = [node("h", None), node("a", "h"), node("b", "a")]
    assert ids(active_path(entries)) == ["h", "a", "b"]


def test_entries_without_parent_ids_hang_under_the_one_before() -> None:
    entries = [{"type": "session", "id": "h"}, {"type": "message", "id": "a"}, {"type": "message", "id": "b"}]
    assert ids(active_path(entries)) == ["h", "a", "b"]


def test_a_rewind_moves_the_leaf_and_the_next_entry_hangs_under_its_target() -> None:
    entries = [node("h", None), node("u1", "h"), node("r1", "u1"), node("t1", "r1"), move("m1", "u1")]
    assert ids(active_path(entries)) == ["h", "u1", "m1"]
    entries.append(node("u2", "u1"))
    assert ids(active_path(entries)) == ["h", "u1", "m1", "u2"]
    assert ids(path_to(entries, "t1")) == ["h", "u1", "r1", "t1"]
    tree = build([Row(e["id"], e.get("parentId"), e.get("targetId")) if e["type"] != "leaf"
                  else Row(e["id"], None, e["targetId"]) for e in entries])
    assert tree.branch_points() == {"u1": ["r1", "u2"]}


def test_switching_back_to_an_abandoned_leaf() -> None:
    entries = [node("h", None), node("a", "h"), node("b", "a"), move("m1", "a"), node("c", "a"), move("m2", "b")]
    assert ids(active_path(entries)) == ["h", "a", "b", "m2"]


def test_a_move_to_an_unknown_entry_is_ignored() -> None:
    entries = [node("h", None), node("a", "h"), move("m", "nope")]
    assert ids(active_path(entries)) == ["h", "a"]


async def test_the_runtime_transcript_follows_a_leaf_move(tmp_path: Path) -> None:
    """Skills, context and the next entry's parent follow the active branch; nothing is deleted."""

    async def guard() -> None:
        return None

    t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(guard))
    await t.ensure_header()
    first = await t.append_message(UserMessage(content="first"))
    await t.append_skill("deck-generation", "workflow", None)
    assert [s.name for s in t.active_skills()] == ["deck-generation"]
    await t.move_leaf(first.id, "rewind", "<session_rewound>x</session_rewound>")
    assert t.active_skills() == [] and t.leaf_id == first.id
    assert t.context()[-1].custom_type == "gamma.session_rewound"  # type: ignore[union-attr]
    nxt = await t.append_message(UserMessage(content="again"))
    assert nxt.parent_id == first.id and len(read_entries(tmp_path / "transcript.jsonl")) == 5
    reloaded = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(guard))
    assert [e.id for e in reloaded.entries] == [e.id for e in t.entries] and reloaded.active_skills() == []
