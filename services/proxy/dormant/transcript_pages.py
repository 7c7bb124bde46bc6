"""`GET /sessions/{sid}/transcript` in pages: `transcript.jsonl` read from a byte cursor.

The whole transcript in one response was 20 MB for a long session (and as much again of the proxy's
memory while it was built). A page is at most GAMMA_TRANSCRIPT_PAGE_MAX entries and
GAMMA_TRANSCRIPT_PAGE_BYTES of lines (always at least one entry), read from where the previous one
ended. The cursor is the byte offset of the next line: the file is append-only (a torn last line is
never part of a page), so a cursor stays valid while the session keeps writing, and a page costs
what it returns, not the file's size. A cursor that is not at a line start is refused.

The file is a tree (shared/history/transcript_tree.py). By default a page holds the active branch's entries
only; finding them takes one scan of the file's tree rows and spans (shared/history/transcript_scan.py: in
slices, orjson, nothing kept but a row per line), but only once the session was ever rewound (a file
without a leaf move is one branch, checked with a byte search). The page then reads only its own
entries' spans: the lines off the branch are neither read again nor parsed. `?tree=1` pages every entry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from pydantic import BaseModel

from shared.history.transcript_scan import Span, file_size, read_spans, scan

LEAF_MARK = b'"type":"leaf"'


class BadCursor(ValueError):
    pass


class Page(BaseModel):
    entries: list[dict[str, Any]]
    next_cursor: str
    has_more: bool


class TreeView(BaseModel):
    leaf_id: str | None = None
    branch_points: dict[str, list[str]] = {}
    branch: list[Span] | None = None  # the active branch's lines in file order; None: never rewound, all are
    length: int = 0  # the bytes the scan read (whole lines)


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
        return TreeView()
    with fh:
        if not _has_leaf_move(fh):
            return TreeView()
    s = scan(path)  # complete lines only: a torn last line a crash left is not an entry
    return TreeView(leaf_id=s.tree.leaf, branch_points=s.tree.branch_points(),
                    branch=[s.spans[i] for i in s.path()], length=s.length)


def read_branch_page(path: Path, view: TreeView, cursor: int, limit: int, max_bytes: int) -> Page:
    """A page of the active branch from its spans: the lines it returns are the only ones read. The
    cursor moves past the lines off the branch, as a page read line by line would."""
    assert view.branch is not None
    if cursor > max(view.length, file_size(path)):
        raise BadCursor("the cursor is past the end of the transcript")
    if cursor and not _at_line_start(path, cursor):
        raise BadCursor("the cursor is not at the start of an entry; use a next_cursor the API returned")
    after = [span for span in view.branch if span[0] >= cursor]
    chosen: list[Span] = []
    used = 0
    for span in after[:limit]:
        if chosen and used + span[1] + 1 > max_bytes:
            break
        chosen.append(span)
        used += span[1] + 1
    entries = [v for line in read_spans(path, chosen) if (v := _parse(line)) is not None]
    more = len(chosen) < len(after)
    end = chosen[-1][0] + chosen[-1][1] + 1 if chosen else cursor
    return Page(entries=entries, next_cursor=str(end if more else max(end, view.length)), has_more=more)


def _at_line_start(path: Path, cursor: int) -> bool:
    with open(path, "rb") as fh:
        fh.seek(cursor - 1)
        return fh.read(1) == b"\n"


def read_page(path: Path, cursor: int, limit: int, max_bytes: int) -> Page:
    """A page of every line from `cursor` (a transcript never rewound, or `?tree=1`)."""
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
            position, used, lines = position + len(line), used + len(line), lines + 1
            if value is not None:
                entries.append(value)
        return Page(entries=entries, next_cursor=str(position), has_more=more)


def view_and_page(path: Path, cursor: int, limit: int, max_bytes: int, tree: bool) -> tuple[TreeView, Page]:
    """The tree view and one page in one trip to the I/O pool (the route's hot path: a client polls it)."""
    view = tree_view(path)
    if tree or view.branch is None:
        return view, read_page(path, cursor, limit, max_bytes)
    return view, read_branch_page(path, view, cursor, limit, max_bytes)


def _complete_line_follows(fh: Any) -> bool:
    return bool(fh.readline().endswith(b"\n"))


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        try:  # what orjson refuses and Python reads (an integer past 64 bits): the entry is still served
            value = json.loads(line)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None
