"""Reading `transcript.jsonl` by offset, in bounded slices (docs/architecture.md "How a session wakes").

A transcript grows for months; no reader here holds more of the file than one slice (`SLICE` bytes,
or one line when a line is longer) plus what it keeps of each line. Every function is blocking: the
callers run them in the I/O pool (`asyncio.to_thread`), never on an event loop.

- `iter_lines`: the complete lines of a byte range, each with its offset (a torn last line, a crash
  in the middle of an append, is not a line);
- `read_spans`: the lines at known (offset, length) spans, neighbours read together;
- `scan`: one pass over the whole file keeping only each entry's tree row and span (rewind, fork,
  the branch view and an index rebuild: shared/history/transcript_index.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from shared.history.transcript_tree import Row, Tree, build, path_indices, row_of

# A scan keeps a row per line: ~700k at 1 GB. Each of CPython's own full collections (one per quarter
# of heap growth) walked them all, holding the GIL and so the event loop: 0.95 s at 100 MB, past a
# 10-s lease at 1 GB on a loaded machine. Services run no such collections (shared/serving/gcpolicy.py
# runs gen 2's itself, on a clock and on growth), and a scan past a few MB runs in a child that runs
# none at all (shared/history/scan_apart.py `as_child`); the rows are freed by refcount when the scan
# is dropped.
SLICE = 1 << 20  # bytes read per call: the most of the file a reader holds at once (beside one long line)
Span = tuple[int, int]  # (offset of the line, its length without the newline)
ENTRY_TYPES = frozenset({"session", "message", "custom_message", "skill_activation", "skill_end", "compaction",
                         "audit", "model_change", "history_repair", "leaf"})


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def iter_lines(path: Path, start: int = 0, end: int | None = None, size: int = SLICE) -> Iterator[tuple[int, bytes]]:
    """(offset, line) for each complete line that starts in [start, end) (end: the file's length now)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, also when the caller stops early
    except FileNotFoundError:
        return
    with fh:
        stop = os.fstat(fh.fileno()).st_size if end is None else end
        if start:
            fh.seek(start)
        pos, pending = start, b""
        while pos < stop:
            chunk = fh.read(min(size, stop - pos))
            if not chunk:
                break
            pos += len(chunk)
            block = pending + chunk
            at, base = 0, pos - len(block)
            while (nl := block.find(b"\n", at)) >= 0:
                if nl > at:
                    yield base + at, block[at:nl]
                at = nl + 1
            pending = block[at:]
        if pending and end is not None:  # a range that ends inside a line: the rest of that line
            rest = fh.read(size)
            while rest and b"\n" not in rest:
                pending, rest = pending + rest, fh.read(size)
            if rest:
                yield pos - len(pending), pending + rest[: rest.index(b"\n")]


def read_spans(path: Path, spans: Sequence[Span], size: int = SLICE) -> list[bytes]:
    """The lines at `spans` (in file order), neighbours read in one call of at most `size` bytes."""
    out: list[bytes] = []
    if not spans:
        return out
    with open(path, "rb") as fh:
        i = 0
        while i < len(spans):
            j, start = i + 1, spans[i][0]
            while j < len(spans) and spans[j][0] + spans[j][1] - start <= size and spans[j][0] >= spans[j - 1][0]:
                j += 1
            end = spans[j - 1][0] + spans[j - 1][1]
            fh.seek(start)
            block = fh.read(end - start)
            out.extend(block[off - start: off - start + n] for off, n in spans[i:j])
            i = j
    return out


def parse_line(line: bytes) -> dict[str, Any] | None:
    """A line as a JSON object of a known entry type; None for anything else (skipped like read_entries)."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("type") not in ENTRY_TYPES:
        return None
    return value


@dataclass
class Scan:
    """Every entry's tree row and span, in file order; `length`: the bytes scanned (whole lines)."""

    rows: list[Row | None] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    length: int = 0
    _tree: Tree | None = None

    @property
    def tree(self) -> Tree:
        if self._tree is None:
            self._tree = build(self.rows)
        return self._tree

    def path(self, to: str | None = None) -> list[int]:
        """Row indices of the branch to `to` (default: the active branch), root first."""
        return path_indices(self.rows, self.tree, to)


def scan(path: Path, on_entry: Callable[[int, dict[str, Any]], None] | None = None,
         start: int = 0) -> Scan:
    """One pass in slices: each line's row and span; `on_entry(row index, parsed line)` for each entry."""
    out = Scan(length=start)
    for offset, line in iter_lines(path, start):
        d = parse_line(line)
        out.rows.append(row_of(d) if d is not None else None)
        out.spans.append((offset, len(line)))
        out.length = offset + len(line) + 1
        if d is not None and on_entry is not None:
            on_entry(len(out.rows) - 1, d)
    return out
