"""The live transcript's window (docs/architecture.md "How a session wakes"): the active branch from the
latest compaction's first kept entry to the leaf, each entry with its line's span; the skills live at
the window's start and at the leaf; the idempotency facts of every branch folded since the ids file
(shared/history/transcript_index.py, shared/history/transcript_ids.py). A session holds this, never its history: its
memory is bounded by the context it replays plus at most `RECENT_MAX` ids. Pure bookkeeping, no I/O:
services/runtime/store/transcript.py reads and writes the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.contracts.records.messages import AssistantMessage, ToolResultMessage
from shared.contracts.records.transcript import (
    AuditEntry,
    LeafEntry,
    MessageEntry,
    SkillActivationEntry,
    SkillEndEntry,
    TranscriptEntry,
)
from shared.history import transcript_ids as tid
from shared.history import transcript_index as ix
from shared.history.context import kept_start_index, latest_compaction_index
from shared.history.rewind import epoch_ms
from shared.history.transcript_branch import Branch
from shared.history.transcript_scan import Span
from shared.history.transcript_tree import build as build_tree
from shared.history.transcript_tree import path_indices, row_of
from shared.history.window_rules import capped, keep_loads, task_start
from shared.storage.file_seen import fold_seen, seen_change


def _fold_skill(live: dict[str, SkillActivationEntry], entry: TranscriptEntry) -> None:
    """The skill contracts follow the branch: the first activation of a name stays the live one until
    a `skill_end` (services/runtime/skillset/skill_lifecycle.py)."""
    if isinstance(entry, SkillActivationEntry):
        live.setdefault(entry.name, entry)
    elif isinstance(entry, SkillEndEntry):
        live.pop(entry.name, None)


def _dumped(entries: list[TranscriptEntry]) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in entries]


@dataclass
class Window:
    entries: list[TranscriptEntry] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)  # each entry's line in the file, (offset, length)
    ids: set[str] = field(default_factory=set)  # ids of the window's entries
    facts: ix.Facts = field(default_factory=ix.Facts)
    older: tid.IdFile | None = None  # the ids before `facts.ids_length`
    base_live: dict[str, SkillActivationEntry] = field(default_factory=dict)  # live at the window's start
    live: dict[str, SkillActivationEntry] = field(default_factory=dict)  # live at the leaf
    base_usage: ix.Usage = field(default_factory=dict)  # the branch's token usage before the window (costs.py)
    base_loads: list[TranscriptEntry] = field(default_factory=list)  # loads in force before the window (`keep_loads`)
    base_seen: dict[str, str] = field(default_factory=dict)  # files the agent saw before the window (file_reads.py)
    last: tuple[int, Span, str] = (0, (0, 0), "")  # the file's length, its last line's span and hash

    @property
    def leaf_id(self) -> str | None:
        if not self.entries:
            return None
        last = self.entries[-1]
        return last.target_id if isinstance(last, LeafEntry) else last.id

    def adopt(self, loaded: ix.Loaded) -> None:
        """The window as a wake (or a rebuild after a leaf move) read it."""
        index = loaded.index
        self.facts, self.older = index.facts(), loaded.older
        self.base_live = {}
        for d in index.base_skills:
            if isinstance(entry := ix.parse_entry(d), SkillActivationEntry):
                self.base_live.setdefault(entry.name, entry)
        self.base_usage = {k: list(v) for k, v in index.base_usage.items()}
        self.base_loads = [e for d in index.base_loads if (e := ix.parse_entry(d)) is not None]
        self.base_seen = dict(index.base_seen)
        self.last = (index.length, index.last or (0, 0), index.last_hash)
        self.replace([e for _, e in loaded.window], [s for s, _ in loaded.window])
        for span, d, entry in loaded.tail:
            self.facts.fold(d)
            self.add(entry, span)
            self.last = (sum(span) + 1, span, "")  # hashed when the index is next written
        self.shift()

    def replace(self, entries: list[TranscriptEntry], spans: list[Span]) -> None:
        self.entries, self.spans, self.ids = [], [], set()
        self.live = dict(self.base_live)
        for e, span in zip(entries, spans, strict=True):
            self.add(e, span)

    def add(self, entry: TranscriptEntry, span: Span) -> None:
        self.entries.append(entry)
        self.spans.append(span)
        self.ids.add(entry.id)
        _fold_skill(self.live, entry)

    def shift(self) -> None:
        """After a compaction: the window starts at its first kept entry (shared/history/context.py
        `kept_start_index`), or where a live workflow's task began when that is earlier
        (shared/history/transcript_index.py `task_start`); the skills live before it become the window's base."""
        last = latest_compaction_index(self.entries)
        start = kept_start_index(self.entries, last) if last >= 0 else 0
        marks = ((pos, e.model_dump(mode="json", by_alias=True)) for pos, e in enumerate(self.entries[:start])
                 if isinstance(e, SkillActivationEntry | SkillEndEntry | AuditEntry))
        start = capped(self.spans, task_start(marks, start), start)  # a live workflow's task stays
        if start <= 0:
            return
        self.base_loads = [e for d in keep_loads(_dumped(self.base_loads), _dumped(self.entries[:start]))
                           if (e := ix.parse_entry(d)) is not None]
        for e in self.entries[:start]:
            _fold_skill(self.base_live, e)
            self.ids.discard(e.id)
            if isinstance(e, MessageEntry) and isinstance(e.message, AssistantMessage):
                u = e.message.usage
                ix.add_usage(self.base_usage, e.message.model or "unknown",
                             (1, u.input, u.cache_read, u.cache_write, u.output))
            elif (isinstance(e, MessageEntry) and isinstance(e.message, ToolResultMessage)
                  and (change := seen_change(e.model_dump(mode="json", by_alias=True))) is not None):
                fold_seen(self.base_seen, change)
        self.entries, self.spans = self.entries[start:], self.spans[start:]  # new lists: a reader's copy stays whole

    def move(self, move: LeafEntry) -> bool:
        """A leaf move just added: the window follows it when its target is in the window at or after
        the latest compaction (the new branch's window is a prefix of this one); False when the branch
        must be read from the file (the target is older)."""
        pos = next((i for i, e in enumerate(self.entries) if e.id == move.target_id), -1)
        if pos < 0 or isinstance(self.entries[pos], LeafEntry) or pos < latest_compaction_index(self.entries):
            return False
        rows = [row_of(e) for e in self.entries]
        keep = path_indices(rows, build_tree(rows))
        self.replace([self.entries[i] for i in keep], [self.spans[i] for i in keep])
        return True

    def branch_to(self, entry_id: str) -> Branch | None:
        """The branch to a node in the window, as far as the window holds it (None: read the file)."""
        pos = next((i for i, e in enumerate(self.entries) if e.id == entry_id), -1)
        if pos < 0 or isinstance(self.entries[pos], LeafEntry):
            return None
        part = self.entries[: pos + 1]
        return Branch(entry_id, [(e.id, epoch_ms(e.timestamp)) for e in part if not isinstance(e, LeafEntry)],
                      part, partial=True)

    def index(self) -> ix.TranscriptIndex | None:
        """The index as of the last append (None until an append hashed the last line)."""
        length, last, digest = self.last
        if not digest:
            return None
        return ix.index_of(self.facts, length=length, last=last, last_hash=digest, window=list(self.spans),
                           ids_length=self.facts.ids_length,
                           base_skills=[e.model_dump(mode="json", by_alias=True, exclude_none=True)
                                        for e in self.base_live.values()],
                           base_usage={k: list(v) for k, v in self.base_usage.items()},
                           base_loads=_dumped(self.base_loads),
                           base_seen=dict(self.base_seen))

    def forget(self, moved: ix.TranscriptIndex, ids_length: int, older: tid.IdFile) -> None:
        """The ids `moved` held are in the ids file now (`ix.save`), which describes `ids_length` bytes;
        those folded since `moved` was built stay."""
        for prompt_id in moved.prompts:
            self.facts.prompts.pop(prompt_id, None)
        for source, source_id, _ in moved.sources:
            self.facts.sources.pop((source, source_id), None)
        self.facts.compactions.difference_update(moved.compactions)
        self.facts.ids_length, self.older = ids_length, older
