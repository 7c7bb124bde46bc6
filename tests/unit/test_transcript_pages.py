"""`GET /transcript`'s pages of a rewound transcript (services/proxy/dormant/transcript_pages.py): one scan
finds the active branch's lines, each page reads only its own; paging with any limit and byte budget
gives the active branch once, in order, and the cursor ends at the file's end like a line-by-line read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.proxy.dormant.transcript_pages import BadCursor, view_and_page
from shared.history.transcript_tree import active_path


def entry(eid: str, parent: str | None, text: str = "") -> dict[str, Any]:
    return {"type": "message", "id": eid, "parentId": parent, "timestamp": "2026-12-06T00:00:00Z",
            "message": {"role": "user", "content": text or eid, "timestamp": 0}}


def leaf(eid: str, target: str) -> dict[str, Any]:
    return {"type": "leaf", "id": eid, "parentId": None, "targetId": target, "timestamp": "2026-12-06T00:00:00Z",
            "note": "rewound"}


def written(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [entry("a", None), entry("b", "a"), entry("c", "b", "x" * 300), entry("d", "c")]
    rows += [leaf("m1", "b"), entry("e", "b"), entry("f", "e", "y" * 500), entry("g", "f")]
    rows += [leaf("m2", "e"), entry("h", "e", "é" * 100), entry("i", "h")]
    path.write_text("".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows) + '{"type":"message","id":"torn')
    return rows


def all_pages(path: Path, limit: int, max_bytes: int) -> tuple[list[dict[str, Any]], int]:
    out, cursor = [], 0
    for _ in range(100):
        view, page = view_and_page(path, cursor, limit, max_bytes, tree=False)
        out += page.entries
        cursor = int(page.next_cursor)
        if not page.has_more:
            return out, cursor
    raise AssertionError("paging did not end")


@pytest.mark.parametrize(("limit", "max_bytes"), [(1, 1 << 20), (2, 1 << 20), (3, 700), (100, 1), (100, 1 << 20)])
def test_pages_of_a_rewound_transcript_give_the_active_branch_once(tmp_path: Path, limit: int, max_bytes: int) -> None:
    path = tmp_path / "transcript.jsonl"
    rows = written(path)
    got, end = all_pages(path, limit, max_bytes)
    assert [e["id"] for e in got] == [e["id"] for e in active_path(rows)] == ["a", "b", "m1", "e", "m2", "h", "i"]
    assert got[5]["message"]["content"] == "é" * 100
    assert end == path.read_bytes().rindex(b"\n") + 1  # past the last complete line, not into the torn one


def test_the_tree_view_names_the_leaf_and_the_branch_points(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    written(path)
    view, page = view_and_page(path, 0, 100, 1 << 20, tree=True)
    assert view.leaf_id == "i"
    assert view.branch_points == {"b": ["c", "e"], "e": ["f", "h"]}
    assert len(page.entries) == 11  # every entry of every branch


def test_a_cursor_not_at_a_line_start_or_past_the_end_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    written(path)
    with pytest.raises(BadCursor):
        view_and_page(path, 5, 10, 1 << 20, tree=False)
    with pytest.raises(BadCursor):
        view_and_page(path, path.stat().st_size + 10, 10, 1 << 20, tree=False)


def test_a_new_entry_after_the_last_page_comes_on_the_next_poll(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    written(path)
    _, end = all_pages(path, 100, 1 << 20)
    with path.open("r+b") as fh:  # the torn line's append is completed, then one more
        fh.seek(end)
        fh.truncate()
        fh.write((json.dumps(entry("j", "i"), separators=(",", ":")) + "\n").encode())
    _, page = view_and_page(path, end, 100, 1 << 20, tree=False)
    assert [e["id"] for e in page.entries] == ["j"] and not page.has_more
