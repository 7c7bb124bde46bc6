"""Transcript entries -> the model context: one rule for the runtime (replay, compaction threshold)
and the compaction service (what it summarizes). Pi's buildSessionContext on a linear transcript.

Conventions (docs/architecture.md "Compaction"):
- entries are the active branch, root to leaf (shared/history/transcript_tree.py), with the leaf moves it
  continued from (a rewind's trusted note);
- the custom messages `gamma.todo_anchor` / `gamma.active_skill` / `gamma.active_knowledge` /
  `gamma.checklist_progress` right after a compaction are
  restored anchors: they are re-created by their owners at every compaction, so they are never a cut
  point, never summarized and never count as "recent" context worth keeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from shared.contracts.records.messages import AgentMessage, CompactionSummaryMessage, CustomMessage
from shared.contracts.records.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    HistoryRepairEntry,
    LeafEntry,
    MessageEntry,
    TranscriptEntry,
)
from shared.history.history_repair import repaired

ANCHOR_TYPES = frozenset({"gamma.todo_anchor", "gamma.active_skill", "gamma.active_knowledge",
                          "gamma.checklist_progress"})


REWOUND = "gamma.session_rewound"


def is_anchor(entry: TranscriptEntry) -> bool:
    return isinstance(entry, CustomMessageEntry) and entry.custom_type in ANCHOR_TYPES


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def entry_message(entry: TranscriptEntry) -> AgentMessage | None:
    """The model-context message an entry stands for (None: header, skill_activation, model_change).
    Stamped with the entry's time, so a replay builds the same message every time."""
    if isinstance(entry, MessageEntry):
        return entry.message
    if isinstance(entry, CustomMessageEntry):
        return CustomMessage(custom_type=entry.custom_type, content=entry.content, display=entry.display,
                             details=entry.details, timestamp=_ms(entry.timestamp))
    if isinstance(entry, LeafEntry):  # the user rewound to here: the note the move carries
        return CustomMessage(custom_type=REWOUND, content=entry.note, display=False,
                             details={"trusted": True, "injectionType": "session_rewound", "source": "system",
                                      "targetId": entry.target_id}, timestamp=_ms(entry.timestamp))
    if isinstance(entry, CompactionEntry):
        return CompactionSummaryMessage(summary=entry.summary, tokens_before=entry.tokens_before,
                                        timestamp=_ms(entry.timestamp))
    return None


def index_of(entries: Sequence[TranscriptEntry], entry_id: str) -> int:
    for i, e in enumerate(entries):
        if e.id == entry_id:
            return i
    return -1


def latest_compaction_index(entries: Sequence[TranscriptEntry], before: int | None = None) -> int:
    """Index of the newest compaction entry (strictly before `before` when given), or -1."""
    end = len(entries) if before is None else before
    for i in range(end - 1, -1, -1):
        if isinstance(entries[i], CompactionEntry):
            return i
    return -1


def kept_start_index(entries: Sequence[TranscriptEntry], compaction_index: int) -> int:
    """Where the entries kept by the compaction at `compaction_index` begin (Pi's buildSessionContext)."""
    entry = entries[compaction_index]
    assert isinstance(entry, CompactionEntry)
    found = index_of(entries[:compaction_index], entry.first_kept_entry_id)
    return found if found >= 0 else compaction_index  # a lost cut entry: keep nothing before it


def context_entries(entries: Sequence[TranscriptEntry]) -> list[TranscriptEntry]:
    """The entries the model sees, in order: latest compaction (as its summary), kept entries, the rest.

    Anchors before the latest compaction are dropped: the compaction restored fresh ones after it.
    """
    last = latest_compaction_index(entries)
    if last < 0:
        return [e for e in entries if _stands_for_message(e)]
    kept = [e for e in entries[kept_start_index(entries, last) : last] if not is_anchor(e)]
    return [e for e in [entries[last], *kept, *entries[last + 1 :]] if _stands_for_message(e)]


def _stands_for_message(entry: TranscriptEntry) -> bool:
    """Whether `entry_message` gives a message for it (checked without building one)."""
    return isinstance(entry, MessageEntry | CustomMessageEntry | CompactionEntry | LeafEntry) and not (
        isinstance(entry, LeafEntry) and not entry.note)


def build_context(entries: Sequence[TranscriptEntry]) -> list[AgentMessage]:
    """The replayed model context: with a compaction, its summary message, then the kept entries
    from firstKeptEntryId up to the compaction, then everything after it; each message as the
    history repairs after it on the branch left it (shared/history/history_repair.py)."""
    if not any(isinstance(e, HistoryRepairEntry) for e in entries):
        return [m for e in context_entries(entries) if (m := entry_message(e)) is not None]
    return [m for _, m in context_with_ids(entries)]


def context_with_ids(entries: Sequence[TranscriptEntry]) -> list[tuple[str, AgentMessage]]:
    """`build_context`, each message with the id of the entry it stands for."""
    repairs = [(i, e) for i, e in enumerate(entries) if isinstance(e, HistoryRepairEntry)]
    position = {e.id: i for i, e in enumerate(entries)}
    out: list[tuple[str, AgentMessage]] = []
    for e in context_entries(entries):
        m = entry_message(e)
        if m is None:
            continue
        at = position.get(e.id, -1)
        for i, repair in repairs:
            if i > at and (not repair.target_ids or e.id in repair.target_ids):
                m = repaired(m, repair.action)
        out.append((e.id, m))
    return out
