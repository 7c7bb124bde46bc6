"""`GET /sessions/{sid}/transcript` in pages: `transcript.jsonl` read from a byte cursor.

The whole transcript in one response was 20 MB for a long session (and as much again of the proxy's
memory while it was built). A page is at most GAMMA_TRANSCRIPT_PAGE_MAX entries and
GAMMA_TRANSCRIPT_PAGE_BYTES of lines (always at least one entry), read from where the previous one
ended. The cursor is the byte offset of the next line: the file is append-only (a torn last line is
never part of a page), so a cursor stays valid while the session keeps writing, and a page costs
what it returns, not the file's size. A cursor that is not at a line start is refused.

The file is a tree (shared/history/transcript_tree.py). By default a page holds the active branch's entries
only; finding them reads the whole file's ids, but only once the session was ever rewound (a file
without a leaf move is one branch, checked with a byte search). `?tree=1` pages every entry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel

from shared.history.transcript_tree import build, path_indices, row_of

LEAF_MARK = b'"type":"leaf"'


class BadCursor(ValueError):
    pass


class Page(BaseModel):
    entries: list[dict[str, Any]]
    next_cursor: str
    has_more: bool


class TreeView(BaseModel):
    keep: set[str] | None  # ids on the active branch; None: every entry is (never rewound)
    leaf_id: str | None = None
    branch_points: dict[str, list[str]] = {}


_SCAN_CHUNK = 1 << 20


def _has_leaf_move(fh: BinaryIO) -> bool:
    """A byte search in 1 MiB chunks (overlapping by the mark's length): the proxy never holds a long
    transcript whole to answer one page."""
    tail = b""
    while chunk := fh.read(_SCAN_CHUNK):
        if LEAF_MARK in tail + chunk:
            return True
        tail = chunk[-len(LEAF_MARK):]
    return False


def tree_view(path: Path) -> TreeView:
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; a missing file is an empty transcript
    except FileNotFoundError:
        return TreeView(keep=None)
    with fh:
        if not _has_leaf_move(fh):
            return TreeView(keep=None)
        fh.seek(0)
        # Complete lines only (a torn last line a crash left is not an entry), one at a time.
        rows = [row_of(v) if (v := _parse(line)) is not None else None for line in fh if line.endswith(b"\n")]
    tree = build(rows)
    keep = {r.id for i in path_indices(rows, tree) if (r := rows[i]) is not None}
    return TreeView(keep=keep, leaf_id=tree.leaf, branch_points=tree.branch_points())


def read_page(path: Path, cursor: int, limit: int, max_bytes: int, keep: set[str] | None = None) -> Page:
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; a missing file is an empty transcript
    except FileNotFoundError:
        if cursor:
            raise BadCursor("the cursor is past the end of the transcript") from None
        return Page(entries=[], next_cursor="0", has_more=False)
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if cursor > size:
            raise BadCursor("the cursor is past the end of the transcript")
        if cursor:
            fh.seek(cursor - 1)
            if fh.read(1) != b"\n":
                raise BadCursor("the cursor is not at the start of an entry; use a next_cursor the API returned")
        entries: list[dict[str, Any]] = []
        position, used, lines = cursor, 0, 0
        while True:
            if lines >= limit:
                more = _complete_line_follows(fh)
                break
            line = fh.readline()
            if not line.endswith(b"\n"):  # the end, or a torn last line a crash left
                more = False
                break
            if lines and used + len(line) > max_bytes:
                more = True
                break
            value = _parse(line)
            if keep is not None and (value is None or value.get("id") not in keep):
                position += len(line)  # off the active branch: skipped, not counted
                continue
            position, used, lines = position + len(line), used + len(line), lines + 1
            if value is not None:
                entries.append(value)
        return Page(entries=entries, next_cursor=str(position), has_more=more)


def view_and_page(path: Path, cursor: int, limit: int, max_bytes: int, tree: bool) -> tuple[TreeView, Page]:
    """The tree view and one page in one trip to the I/O pool (the route's hot path: a client polls it)."""
    view = tree_view(path)
    return view, read_page(path, cursor, limit, max_bytes, None if tree else view.keep)


def _complete_line_follows(fh: Any) -> bool:
    return bool(fh.readline().endswith(b"\n"))


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
