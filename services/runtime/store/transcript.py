"""`transcript.jsonl`: Pi's session entries, appended only by the lease holder, replayed on restore.

Every append first runs the `guard` (the lease check), so a worker that lost its lease cannot
write. Idempotency indexes (prompt ids, injection sources, compaction request ids) are kept in the
transcript index and the ids file beside the file (shared/history/transcript_index.py, shared/history/transcript_ids.py)
and folded from every line appended since, so a new holder never records the same prompt or injection
twice. A wake holds the window the
model's context is built from, never the whole history (docs/architecture.md "How a session wakes").
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from pydantic import TypeAdapter

from services.runtime.store.transcript_window import Window
from services.runtime.store.write_guard import Guard
from shared.contracts.records.messages import AgentMessage, CustomMessage
from shared.contracts.records.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    LeafEntry,
    MessageEntry,
    SessionHeader,
    SkillActivationEntry,
    TranscriptEntry,
    parse_entries,
)
from shared.history import transcript_ids as tid
from shared.history import transcript_index as ix
from shared.history.context import build_context
from shared.history.transcript_branch import Branch, read_branch_apart
from shared.storage.disk import append_lines_unsynced, iter_jsonl, jsonl_line

log = structlog.get_logger()
_ENTRIES: TypeAdapter[list[TranscriptEntry]] = TypeAdapter(list[TranscriptEntry])


def read_entries(path: Path) -> list[TranscriptEntry]:
    """Every entry of the file (the full read a wake no longer does: tests compare the window against
    it, and small files' readers use it). Complete lines only. Fast path: the whole file validated in one pydantic-core call (JSON parsed
    in Rust); on any odd line (unknown entry type, torn write) fall back to line by line."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = raw.split(b"\n")
    if lines and lines[-1] != b"":
        lines = lines[:-1]  # a torn last line
    body = [line for line in lines if line.strip()]
    try:
        return _ENTRIES.validate_json(b"[" + b",".join(body) + b"]")
    except ValueError:
        return parse_entries(list(iter_jsonl(path)))


def fsync_and_close(fh: Any) -> None:
    """shared/storage/disk.py `sync_and_close` for a caller already in the I/O pool (write_guard.py `then`)."""
    try:
        os.fsync(fh.fileno())
    finally:
        fh.close()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Transcript:
    """The live transcript: its window (services/runtime/store/transcript_window.py: the active branch from
    the latest compaction's first kept entry to the leaf, the live skills, the idempotency facts). The
    rest of the file is read on demand, by offset, in the I/O pool (`branch_to`)."""

    def __init__(self, path: Path, guard: Guard) -> None:
        self.path = path
        self._guard = guard
        self.w = Window()
        self._version = 0  # bumped at every change of `entries` (the context cache's key)
        self._context: tuple[int, list[AgentMessage]] | None = None
        self._appending = asyncio.Lock()
        self._moved = self._index_due = False  # set by an append, acted on after its fsync
        self.appended = 0  # entries this holder appended (the window shrinks at a compaction; this never does)

    @property
    def entries(self) -> list[TranscriptEntry]:
        """The active branch from the latest compaction's first kept entry to the leaf (what the model's
        context is built from: shared/history/context.py), not the whole history."""
        return self.w.entries

    @property
    def loads(self) -> list[TranscriptEntry]:
        """The window's entries after what is still in force from before it: the live skill activations
        and the load results (connectors, tool namespaces, knowledge notes: shared/history/transcript_index.py
        `keep_loads`). Loaded state is read from these, not from the window alone."""
        return [*self.w.base_live.values(), *self.w.base_loads, *self.w.entries]

    @property
    def prompts(self) -> tid.Known[str]:
        """prompt id -> the entry that recorded it, on any branch (a look-up may read a few KiB of the
        ids file: shared/history/transcript_ids.py)."""
        return tid.Known(self.w.facts.prompts, self.w.older, tid.prompt_key)

    @property
    def sources(self) -> tid.Known[tuple[str, str]]:
        """(source, source id) -> the entry that recorded the injection, on any branch."""
        return tid.Known(self.w.facts.sources, self.w.older, tid.source_key)

    @property
    def told(self) -> dict[str, tuple[int, str]]:
        return self.w.facts.told

    @property
    def compactions(self) -> tid.Known[str]:
        return tid.Known(dict.fromkeys(self.w.facts.compactions, ""), self.w.older, tid.compaction_key)

    @classmethod
    def load(cls, path: Path, guard: Guard) -> Transcript:
        return cls.of(path, guard, ix.load(path))

    @classmethod
    def of(cls, path: Path, guard: Guard, loaded: ix.Loaded) -> Transcript:
        """The transcript as a wake read it (in the I/O pool: shared/history/transcript_index.py `load`)."""
        t = cls(path, guard)
        t.w.adopt(loaded)
        return t

    @property
    def leaf_id(self) -> str | None:
        return self.w.leaf_id

    def has(self, entry_id: str) -> bool:
        """In the window (a rewind's own entries, just appended, always are)."""
        return entry_id in self.w.ids

    async def branch_to(self, entry_id: str) -> Branch | None:
        """The branch from the root to `entry_id` (None: no such node): from the window when it holds the
        entry (`partial`), else read from the file by offset in the I/O pool."""
        return self.w.branch_to(entry_id) or await self.read_branch(entry_id)

    async def read_branch(self, entry_id: str) -> Branch | None:
        return await asyncio.to_thread(read_branch_apart, self.path, entry_id)  # a long file's scan: a child

    def context(self) -> list[AgentMessage]:
        """The replayed model context (cached until the next append; callers get their own list)."""
        if self._context is None or self._context[0] != self._version:
            self._context = (self._version, build_context(self.entries))
        return list(self._context[1])

    def active_skills(self) -> list[SkillActivationEntry]:
        """The live skill activations (activated and not ended since), in activation order."""
        return list(self.w.live.values())

    # ------------------------------------------------------------ appends

    async def ensure_header(self, preloaded: Sequence[tuple[str, str]] = ()) -> None:
        """A new session's first lines, in one write (one fsync on the wake's path, not one per line):
        the header, then the activations of the variant's preloaded skills, `(name, type)` each."""
        if self.entries:
            return
        batch: list[TranscriptEntry] = [SessionHeader(id=self._new_id(), timestamp=now_iso())]
        for name, skill_type in preloaded:
            batch.append(SkillActivationEntry(id=self._new_id(), parent_id=batch[-1].id, timestamp=now_iso(),
                                              name=name, skill_type=skill_type,  # type: ignore[arg-type]
                                              required_by=None, preloaded=True))
        await self._append(batch)

    async def append_message(self, message: AgentMessage, prompt_id: str | None = None) -> TranscriptEntry:
        if isinstance(message, CustomMessage):
            return await self.append_custom(message)
        entry = MessageEntry(id=self._new_id(), parent_id=self.leaf_id, timestamp=now_iso(), message=message,
                             prompt_id=prompt_id)
        await self._append([entry])
        return entry

    async def append_custom(self, message: CustomMessage) -> CustomMessageEntry:
        entry = CustomMessageEntry(
            id=self._new_id(), parent_id=self.leaf_id, timestamp=now_iso(), custom_type=message.custom_type,
            content=message.content, display=message.display, details=message.details,
        )
        await self._append([entry])
        return entry

    async def append_skill(self, name: str, skill_type: str, required_by: str | None,
                           preloaded: bool = False) -> SkillActivationEntry:
        entry = SkillActivationEntry(id=self._new_id(), parent_id=self.leaf_id, timestamp=now_iso(), name=name,
                                     skill_type=skill_type,  # type: ignore[arg-type]
                                     required_by=required_by, preloaded=preloaded)
        await self._append([entry])
        return entry

    async def append_compaction(
        self, summary: str, first_kept_entry_id: str, tokens_before: int, details: dict[str, Any],
        request_id: str, anchors: list[CustomMessage],
    ) -> list[TranscriptEntry]:
        """The compaction entry and its restored anchors in one write: a restart replays both or neither."""
        entry = CompactionEntry(id=self._new_id(), parent_id=self.leaf_id, timestamp=now_iso(), summary=summary,
                                first_kept_entry_id=first_kept_entry_id, tokens_before=tokens_before,
                                details=details, request_id=request_id)
        batch: list[TranscriptEntry] = [entry]
        parent = entry.id
        for a in anchors:
            anchor = CustomMessageEntry(id=self._new_id(), parent_id=parent, timestamp=now_iso(),
                                        custom_type=a.custom_type, content=a.content, display=a.display,
                                        details=a.details)
            batch.append(anchor)
            parent = anchor.id
        await self._append(batch)
        return batch

    async def append_entry(self, entry: TranscriptEntry) -> TranscriptEntry:
        """An entry built by its owner (e.g. an `AuditEntry`, services/runtime/skillset/audit.py)."""
        await self._append([entry])
        return entry

    async def move_leaf(self, target_id: str, reason: str, note: str) -> LeafEntry:
        """Make `target_id` the leaf (Pi's tree navigation): nothing is deleted; the next entry hangs
        under it. The caller checked that it is a node."""
        entry = LeafEntry(id=self._new_id(), timestamp=now_iso(), target_id=target_id, from_id=self.leaf_id,
                          reason=reason, note=note)  # type: ignore[arg-type]
        await self._append([entry])
        return entry

    def new_id(self) -> str:
        return self._new_id()

    async def _append(self, batch: list[TranscriptEntry]) -> None:
        """One append at a time: the guard may await (a lease renewal, the disk fence), and two appends
        that both built their entry on the same leaf (parallel tool calls each activating a skill) would
        fork the chain. The batch is linked to the leaf and stamped after the guard, right before the
        write, so the file's order, parents and timestamps agree. The index is written after a
        compaction (the window moved) and rebuilt after a leaf move (the branch changed): not at every
        append, whose lines a wake reads after the index anyway (shared/history/transcript_index.py)."""
        async with self._appending:
            def write() -> tuple[Any, int, list[dict[str, Any]], list[bytes]]:  # in the I/O pool, guard passed
                if not isinstance(batch[0], LeafEntry):  # a leaf move is not a node: it has no parent
                    batch[0].parent_id = self.leaf_id
                stamp = now_iso()
                for e in batch:
                    e.timestamp = stamp
                records = [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in batch]
                lines = [jsonl_line(r) for r in records]
                fh, start = append_lines_unsynced(self.path, lines)
                return fh, start, records, lines

            def written(result: tuple[Any, int, list[dict[str, Any]], list[bytes]]) -> None:
                # in the file for every reader: in memory too, even if we are cancelled now
                _, offset, records, lines = result
                for e, record, line in zip(batch, records, lines, strict=True):
                    self.w.facts.fold(record)
                    self.w.add(e, (offset, len(line)))
                    offset += len(line) + 1
                    self.appended += 1
                    if isinstance(e, LeafEntry) and not self.w.move(e):
                        self._moved = True  # the new branch leaves the window: read from the file below
                self.w.last = (offset, (offset - len(lines[-1]) - 1, len(lines[-1])), ix.line_hash(lines[-1]))
                if any(isinstance(e, CompactionEntry) for e in batch):
                    self.w.shift()
                self._index_due = self._index_due or any(isinstance(e, CompactionEntry | LeafEntry) for e in batch)
                self._version += 1

            # The fsync follows in the same thread, the fence already on its way back (write_guard.py `then`).
            await self._guard.write(write, written, files=False, then=lambda result: fsync_and_close(result[0]))
            if self._moved:  # the new branch's window, live skills and index, from one scan of the file
                self._moved = self._index_due = False
                self.w.adopt(await asyncio.to_thread(ix.load, self.path, True))
                self._version += 1
            elif self._index_due:
                self._index_due = False
                await self.write_index()

    async def write_index(self) -> None:
        """The index as of the last append (built here, written in the I/O pool, its ids moved to the ids
        file once there are `RECENT_MAX`: `ix.save`). A failed write is logged: the index and the ids
        file are a cache, rebuilt from the transcript when a wake finds them stale."""
        index = self.w.index()
        if index is None:
            return
        try:
            saved = await asyncio.to_thread(ix.save, self.path, index)
        except (OSError, ValueError) as exc:
            log.warning("transcript_index_not_written", path=str(self.path), error=str(exc))
            return
        if saved.ids_length != index.ids_length:
            self.w.forget(index, saved.ids_length, tid.IdFile(tid.ids_path(self.path)))

    def _new_id(self) -> str:
        """Four random bytes (Pi's ids) while the file is small; six past 64 MiB, whose ids outside the
        window are not held in memory to check against."""
        n = 4 if self.w.last[0] < 1 << 26 else 6
        while True:
            candidate = secrets.token_hex(n)
            if candidate not in self.w.ids:
                return candidate
