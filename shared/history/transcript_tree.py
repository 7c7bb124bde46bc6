"""The transcript as a tree (Pi's id/parentId entries; docs/architecture.md "Snapshots, rewind and fork").

Entries are appended to `transcript.jsonl` in time order; each names its parent. The active branch is
the path from the root to the leaf: the last entry written, unless a `LeafEntry` (type "leaf") moved
the leaf since. A leaf move is not a node: the entry written after it hangs under its target, and the
move itself stays on that branch, just before that entry, as the note the model reads there ("the
user rewound to here"). Nothing is ever deleted: abandoned branches stay in the file.

Transcripts written before parent ids existed still load: an entry without a known parent (other than
the first) hangs under the entry written before it. Everything here is iterative and linear in the
number of entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)  # one per line of a long transcript's scan: small, no __dict__
class Row:
    """What the tree needs of an entry: its id, its parent, and, for a leaf move, its target."""

    id: str
    parent: str | None
    target: str | None = None  # set only for a leaf move


def row_of(entry: Any) -> Row | None:
    """A Row from a TranscriptEntry model or a raw JSON dict (the proxy reads dicts)."""
    if isinstance(entry, dict):
        eid, kind = entry.get("id"), entry.get("type")
        parent, target = entry.get("parentId"), entry.get("targetId")
    else:
        eid, kind = getattr(entry, "id", None), getattr(entry, "type", None)
        parent, target = getattr(entry, "parent_id", None), getattr(entry, "target_id", None)
    if not isinstance(eid, str):
        return None
    if kind == "leaf":
        return Row(eid, None, target if isinstance(target, str) else "")
    return Row(eid, parent if isinstance(parent, str) else None)


@dataclass
class Tree:
    parent: dict[str, str | None] = field(default_factory=dict)  # node -> its (resolved) parent
    order: dict[str, int] = field(default_factory=dict)  # id -> index in the file (nodes and moves)
    children: dict[str, list[str]] = field(default_factory=dict)
    note_before: dict[str, int] = field(default_factory=dict)  # node -> index of the move it follows
    leaf: str | None = None
    trailing_move: int | None = None  # a move with nothing written after it yet

    def branch_points(self) -> dict[str, list[str]]:
        return {k: v for k, v in self.children.items() if len(v) > 1}


def build(rows: Sequence[Row | None]) -> Tree:
    t = Tree()
    pending: tuple[int, str] | None = None  # the last leaf move: (index, target)
    for i, row in enumerate(rows):
        if row is None or row.id in t.order:
            continue
        t.order[row.id] = i
        if row.target is not None:
            if row.target in t.parent:
                t.leaf, pending = row.target, (i, row.target)
            continue
        parent = row.parent if row.parent in t.parent else t.leaf
        t.parent[row.id] = parent
        if parent is not None:
            t.children.setdefault(parent, []).append(row.id)
        if pending is not None and pending[1] == parent:
            t.note_before[row.id] = pending[0]
        pending = None
        t.leaf = row.id
    t.trailing_move = pending[0] if pending is not None else None
    return t


def path_indices(rows: Sequence[Row | None], tree: Tree, to: str | None = None) -> list[int]:
    """Indices (into `rows`) of the branch from the root to `to` (default: the leaf), in order, with
    the leaf moves that branch continued from. Empty when `to` is not a node."""
    end = tree.leaf if to is None else to
    if end is None or end not in tree.parent:
        return []
    chain: list[str] = []
    node: str | None = end
    while node is not None and len(chain) <= len(tree.parent):
        chain.append(node)
        node = tree.parent.get(node)
    out: list[int] = []
    for nid in reversed(chain):
        if nid in tree.note_before:
            out.append(tree.note_before[nid])
        out.append(tree.order[nid])
    if to is None and tree.trailing_move is not None:
        out.append(tree.trailing_move)
    return out


def active_path(entries: Sequence[Any]) -> list[Any]:
    """The active branch of a transcript's entries (models or dicts), root to leaf."""
    rows = [row_of(e) for e in entries]
    return [entries[i] for i in path_indices(rows, build(rows))]


def path_to(entries: Sequence[Any], entry_id: str) -> list[Any]:
    """The branch from the root to `entry_id` ([] when there is no such node)."""
    rows = [row_of(e) for e in entries]
    return [entries[i] for i in path_indices(rows, build(rows), entry_id)]
