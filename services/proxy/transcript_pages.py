"""`GET /sessions/{sid}/transcript` in pages: `transcript.jsonl` read from a byte cursor.

The whole transcript in one response was 20 MB for a long session (and as much again of the proxy's
memory while it was built). A page is at most GAMMA_TRANSCRIPT_PAGE_MAX entries and
GAMMA_TRANSCRIPT_PAGE_BYTES of lines (always at least one entry), read from where the previous one
ended. The cursor is the byte offset of the next line: the file is append-only (a torn last line is
never part of a page), so a cursor stays valid while the session keeps writing, and a page costs
what it returns, not the file's size. A cursor that is not at a line start is refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel


class BadCursor(ValueError):
    pass


class Page(BaseModel):
    entries: list[dict[str, Any]]
    next_cursor: str
    has_more: bool


def read_page(path: Path, cursor: int, limit: int, max_bytes: int) -> Page:
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
            position, used, lines = position + len(line), used + len(line), lines + 1
            value = _parse(line)
            if value is not None:
                entries.append(value)
        return Page(entries=entries, next_cursor=str(position), has_more=more)


def _complete_line_follows(fh: Any) -> bool:
    return bool(fh.readline().endswith(b"\n"))


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
