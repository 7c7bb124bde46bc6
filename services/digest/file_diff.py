"""File digests: a line diff for text, a dirty marker for binaries and unknown bases. Pure functions.

A file's text (a new file's content, a diff's lines) is whoever wrote the file's, never the harness's:
it goes in as a quotation (`quoted`, docs/architecture.md "Trust boundaries") after a harness sentence
naming it, so no line of it reads as a line of the developer-role block."""

from __future__ import annotations

import difflib
from typing import Literal

from shared.trust.trusted_blocks import Author, Part, fragment, lines, quoted

Level = Literal["inline", "scoped", "dirty"]

INLINE_MAX_CHARS = 2000  # a unified diff up to this size goes into the digest in full
MAX_DIFF_BYTES = 512 * 1024  # larger files are not diffed: dirty marker
MAX_HUNKS = 20  # more changed regions than this: dirty marker
DIRTY_TEXT = "The file changed. Read the current file."


def as_text(data: bytes) -> str | None:
    """UTF-8 text without NUL bytes, else None (binary)."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _ranges(old_lines: list[str], new_lines: list[str]) -> list[tuple[int, int]]:
    """Changed line ranges in the new file, 1-based inclusive (a pure deletion names the line after it)."""
    out: list[tuple[int, int]] = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        start = j1 + 1
        end = max(j2, start)
        out.append((start, end))
    return out


def _fmt_range(r: tuple[int, int]) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}-{r[1]}"


def file_digest(old: bytes | None, new: bytes | None, author: Author = "user") -> tuple[Level, Part] | None:
    """None when the content is identical; the diff's lines quoted as `author`'s."""
    if new is None:
        return "dirty", "The file was deleted."
    if old is None:
        return "dirty", DIRTY_TEXT
    if old == new:
        return None
    old_text, new_text = as_text(old), as_text(new)
    if old_text is None or new_text is None:
        return "dirty", f"The binary file changed (now {len(new)} bytes). Read it if you need its content."
    if len(old) > MAX_DIFF_BYTES or len(new) > MAX_DIFF_BYTES:
        return "dirty", DIRTY_TEXT
    old_lines, new_lines = old_text.splitlines(), new_text.splitlines()
    ranges = _ranges(old_lines, new_lines)
    if not ranges:  # only line endings or a trailing newline changed
        return "inline", "Only whitespace at line ends changed."
    if len(ranges) > MAX_HUNKS:
        return "dirty", DIRTY_TEXT
    diff = "\n".join(difflib.unified_diff(old_lines, new_lines, "before", "after", n=1, lineterm=""))
    diff = "\n".join(line for line in diff.splitlines() if not line.startswith(("--- ", "+++ ")))
    if len(diff) <= INLINE_MAX_CHARS:
        return "inline", fragment(lines("Line diff from the revision you saw:", quoted(author, diff)))
    where = ", ".join(_fmt_range(r) for r in ranges)
    return "scoped", (f"Changed lines: {where} (the file now has {len(new_lines)} lines). "
                      "Read those lines before you rely on them; the rest is unchanged.")


def new_file_digest(new: bytes | None, author: Author = "user") -> Part:
    """A file that did not exist before: its size, and a small text file's whole content (quoted as
    `author`'s)."""
    if new is None:
        return "A new file was added. Read it."
    text = as_text(new)
    if text is None:
        return f"A new binary file was added ({len(new)} bytes). Read it if you need its content."
    count = len(text.splitlines())
    counted = f"{count} line" + ("" if count == 1 else "s")
    if len(text) <= INLINE_MAX_CHARS:
        return fragment(lines(f"A new file was added ({len(new)} bytes, {counted}). Its content:", quoted(author, text)))
    return f"A new file was added ({len(new)} bytes, {counted}). Read it before you rely on it."
