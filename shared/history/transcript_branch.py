"""A branch of a long transcript, read by offset (docs/architecture.md "How a session wakes"): what a
live rewind, an edit-and-branch or a branch switch needs of the branch to its target, without holding
the branch's entries. One scan in slices keeps each line's tree row, span and time
(shared/history/transcript_scan.py); then only the branch's last tool batch is parsed.

Blocking: the runtime and the proxy call `read_branch_apart` in the I/O pool (a long file's scan in a
child process: shared/history/scan_apart.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.contracts.records.messages import AssistantMessage, UserMessage
from shared.contracts.records.transcript import MessageEntry, TranscriptEntry
from shared.history import scan_apart
from shared.history.rewind import epoch_ms
from shared.history.transcript_index import parse_entry
from shared.history.transcript_scan import Scan, parse_line, read_spans, scan

TAIL_MAX = 4096  # entries parsed back from a branch's end, at most (a tool batch is far shorter)


@dataclass(frozen=True)
class Branch:
    """The branch from the root to `target`: its nodes as (id, epoch ms), and its last entries parsed,
    back to the message that opened its last tool batch (shared/history/rewind.py `leaf_moves` reads no more)."""

    target: str
    nodes: list[tuple[str, int]]
    tail: list[TranscriptEntry]
    partial: bool = False  # the nodes start at the live window, not at the root (services/runtime/store/rewind.py)


def _times() -> Any:
    """A scan's `on_entry` keeping each entry's time (epoch ms), and the dict it fills."""
    times: dict[int, int] = {}

    def on_entry(i: int, d: dict[str, Any]) -> None:
        ts = d.get("timestamp")
        if isinstance(ts, str):
            try:
                times[i] = epoch_ms(ts)
            except ValueError:
                times[i] = 0
    return times, on_entry


def branch_tail(transcript: Path, spans: list[tuple[int, int]]) -> list[TranscriptEntry]:
    """The branch's last entries, read back in slices of 64 until its last tool batch is whole: an
    assistant message or a user message ends the walk (shared/history/rewind.py `unanswered_calls`)."""
    out: list[TranscriptEntry] = []
    end = len(spans)
    while end > 0 and len(out) < TAIL_MAX:
        start = max(0, end - 64)
        parsed = [e for line in read_spans(transcript, spans[start:end])
                  if (d := parse_line(line)) is not None and (e := parse_entry(d)) is not None]
        out[:0] = parsed
        if any(isinstance(e, MessageEntry) and isinstance(e.message, AssistantMessage | UserMessage)
               for e in parsed):
            break
        end = start
    return out


def timed_scan(transcript: Path) -> tuple[Scan, dict[int, int]]:
    """One scan: every line's row and span, and each entry's time (epoch ms) by row index."""
    times: dict[int, int]
    times, on_entry = _times()
    return scan(transcript, on_entry), times


def read_branch(transcript: Path, target: str) -> Branch | None:
    s, times = timed_scan(transcript)
    indices = s.path(target)
    if not indices:
        return None
    nodes: list[tuple[str, int]] = []
    for i in indices:
        row = s.rows[i]
        if row is not None and row.target is None:
            nodes.append((row.id, times.get(i, 0)))
    return Branch(target, nodes, branch_tail(transcript, [s.spans[i] for i in indices]))


def read_branch_apart(transcript: Path, target: str) -> Branch | None:
    """`read_branch`, in a child process for a long file (the GIL kept for the event loop)."""
    ok, result = scan_apart.loads(scan_apart.in_child(scan_apart.BRANCH_CHILD, transcript, target))
    if ok and (result is None or isinstance(result, Branch)):
        return result
    return read_branch(transcript, target)


def _child_read(transcript: Path, target: str) -> Branch | None:
    from shared.history import transcript_branch  # the Branch the parent unpickles, not __main__'s  # noqa: PLW0406

    return transcript_branch.read_branch(transcript, target)


if __name__ == "__main__":  # scan_apart.py's child
    scan_apart.as_child(_child_read)
