"""What a compaction removes and what it remembers: rules the runtime (the cut) and the compaction
service (the summary) share, so both agree on the span without a second copy (Pi's compaction.ts).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.contracts.records.messages import AssistantMessage, ToolCall
from shared.contracts.records.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
    TranscriptEntry,
)
from shared.history.context import index_of, is_anchor, kept_start_index, latest_compaction_index
from shared.trust.trusted_blocks import render, token

READ_TOOLS = frozenset({"read"})
MODIFY_TOOLS = frozenset({"write", "edit"})
PATH_ARGS = ("path", "file_path")


def is_turn_start(entry: TranscriptEntry) -> bool:
    if isinstance(entry, MessageEntry):
        return entry.message.role == "user"
    return isinstance(entry, CustomMessageEntry) and not is_anchor(entry)


def summarizable(entry: TranscriptEntry) -> bool:
    return isinstance(entry, MessageEntry) or (isinstance(entry, CustomMessageEntry) and not is_anchor(entry))


def turn_start_before(entries: Sequence[TranscriptEntry], cut: int, start: int) -> int:
    """The entry opening the turn that `cut` splits (-1: the cut is at a turn start)."""
    if is_turn_start(entries[cut]):
        return -1
    return next((i for i in range(cut - 1, start - 1, -1) if is_turn_start(entries[i])), -1)


@dataclass(frozen=True)
class SummarySpan:
    """The entries a compaction removes from context: `history` before the cut turn, `turn_prefix`
    the part of a split turn that goes (it gets its own short summary)."""

    history: list[TranscriptEntry] = field(default_factory=list)
    turn_prefix: list[TranscriptEntry] = field(default_factory=list)
    previous: CompactionEntry | None = None


def summary_span(entries: Sequence[TranscriptEntry], first_kept_entry_id: str, upto_entry_id: str) -> SummarySpan:
    """From the previous compaction's kept point (or the start) up to `first_kept_entry_id`.

    Raises LookupError when the ids are not in the transcript (a stale request).
    """
    upto = index_of(entries, upto_entry_id)
    kept = index_of(entries, first_kept_entry_id)
    if upto < 0 or kept < 0 or kept > upto:
        raise LookupError(f"entries {first_kept_entry_id!r}..{upto_entry_id!r} not in the transcript")
    last = latest_compaction_index(entries, before=kept)
    previous = entries[last] if last >= 0 else None
    assert previous is None or isinstance(previous, CompactionEntry)
    start = last + 1
    turn_start = turn_start_before(entries, kept, start)
    history_end = turn_start if turn_start >= 0 else kept
    history: list[TranscriptEntry] = []
    if last >= 0:
        history += [e for e in entries[kept_start_index(entries, last) : last] if summarizable(e)]
    history += [e for e in entries[start:history_end] if summarizable(e)]
    prefix = [e for e in entries[turn_start:kept] if summarizable(e)] if turn_start >= 0 else []
    return SummarySpan(history=history, turn_prefix=prefix, previous=previous)


def _tool_path(call: ToolCall) -> str | None:
    for key in PATH_ARGS:
        value = call.arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _previous_files(entries: list[TranscriptEntry], previous_details: dict[str, Any] | None) -> tuple[set[str], set[str]]:
    if previous_details is None:
        last = latest_compaction_index(entries)
        found = entries[last] if last >= 0 else None
        previous_details = found.details if isinstance(found, CompactionEntry) else None
    if not previous_details:
        return set(), set()
    return ({str(f) for f in previous_details.get("readFiles", []) or []},
            {str(f) for f in previous_details.get("modifiedFiles", []) or []})


def file_operations(
    entries: Iterable[TranscriptEntry], previous_details: dict[str, Any] | None = None
) -> dict[str, list[str]]:
    """`{"readFiles", "modifiedFiles"}` from read/write/edit calls, merged with the previous
    compaction's details (given, or else those of the latest compaction entry among `entries`);
    a file both read and modified is listed as modified only (Pi)."""
    entries = list(entries)
    read, modified = _previous_files(entries, previous_details)
    for entry in entries:
        if not isinstance(entry, MessageEntry) or not isinstance(entry.message, AssistantMessage):
            continue
        for call in entry.message.tool_calls():
            path = _tool_path(call)
            if path is None:
                continue
            if call.name in READ_TOOLS:
                read.add(path)
            elif call.name in MODIFY_TOOLS:
                modified.add(path)
    return {"readFiles": sorted(read - modified), "modifiedFiles": sorted(modified)}


def format_file_operations(details: dict[str, list[str]]) -> str:
    """The `<read-files>` / `<modified-files>` blocks Pi appends to a summary."""
    # Paths the model chose: one line each (`token`), none can start a line of its own.
    sections = [render(tag, None, "\n".join(token(p) for p in details[key])) for tag, key in
                (("read-files", "readFiles"), ("modified-files", "modifiedFiles")) if details.get(key)]
    return "\n\n" + "\n\n".join(sections) if sections else ""
