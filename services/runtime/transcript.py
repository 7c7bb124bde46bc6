"""`transcript.jsonl`: Pi's session entries, appended only by the lease holder, replayed on restore.

Every append first runs the `guard` (the lease check), so a worker that lost its lease cannot
write. Idempotency indexes (prompt ids, injection sources, compaction request ids) are rebuilt
from the file, so a new holder never records the same prompt or injection twice.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from shared.context import build_context
from shared.contracts.messages import AgentMessage, CustomMessage
from shared.contracts.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    LeafEntry,
    MessageEntry,
    SessionHeader,
    SkillActivationEntry,
    SkillEndEntry,
    TranscriptEntry,
    parse_entries,
)
from shared.disk import append_unsynced, iter_jsonl, sync_and_close
from shared.transcript_tree import active_path, path_to

from .write_guard import Guard

_ENTRIES: TypeAdapter[list[TranscriptEntry]] = TypeAdapter(list[TranscriptEntry])


def read_entries(path: Path) -> list[TranscriptEntry]:
    """Complete lines only. Fast path: the whole file validated in one pydantic-core call (JSON parsed
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


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Transcript:
    def __init__(self, path: Path, guard: Guard) -> None:
        self.path = path
        self._guard = guard
        self.entries: list[TranscriptEntry] = []  # the active branch, root to leaf (shared/transcript_tree.py)
        self.all: list[TranscriptEntry] = []  # every entry, every branch, in file order
        self._version = 0  # bumped at every change of `entries` (the context cache's key)
        self._ids: set[str] = set()
        self._nodes: set[str] = set()  # ids of the tree's nodes (every entry but the leaf moves)
        self.prompts: dict[str, str] = {}  # prompt_id -> entry id
        self.sources: dict[tuple[str, str], str] = {}  # (source, source_id) -> entry id
        # ref -> (highest to_revision recorded in an artifact_update, its entry id)
        self.told: dict[str, tuple[int, str]] = {}
        self.compactions: set[str] = set()  # request ids
        # name -> its live activation (services/runtime/skill_lifecycle.py: a `skill_end` removes it)
        self._live: dict[str, SkillActivationEntry] = {}
        self._context: tuple[int, list[AgentMessage]] | None = None
        self._appending = asyncio.Lock()

    @classmethod
    def load(cls, path: Path, guard: Guard) -> Transcript:
        return cls.of(path, guard, read_entries(path))

    @classmethod
    def of(cls, path: Path, guard: Guard, entries: Sequence[TranscriptEntry]) -> Transcript:
        """The transcript whose file holds `entries` (read beforehand, e.g. in the I/O pool at a wake)."""
        t = cls(path, guard)
        for entry in entries:
            t._index(entry)
        t._set_branch(active_path(t.all))
        return t

    def _set_branch(self, entries: list[TranscriptEntry]) -> None:
        """The active branch replaced (a load, a leaf move): what depends on it is derived again."""
        self.entries = []
        self._live = {}
        for e in entries:
            self._on_branch(e)

    def _on_branch(self, entry: TranscriptEntry) -> None:
        """An entry now on the active branch: the skill contracts follow the branch (a rewind restores
        the skills live at its entry)."""
        self.entries.append(entry)
        if isinstance(entry, SkillActivationEntry):
            self._live.setdefault(entry.name, entry)
        elif isinstance(entry, SkillEndEntry):
            self._live.pop(entry.name, None)

    @property
    def leaf_id(self) -> str | None:
        if not self.entries:
            return None
        last = self.entries[-1]
        return last.target_id if isinstance(last, LeafEntry) else last.id

    def has(self, entry_id: str) -> bool:
        return entry_id in self._ids

    def is_node(self, entry_id: str) -> bool:
        return entry_id in self._nodes

    def branch_to(self, entry_id: str) -> list[TranscriptEntry]:
        """The branch from the root to `entry_id` ([] when it is not a node of this transcript)."""
        return path_to(self.all, entry_id)

    def context(self) -> list[AgentMessage]:
        """The replayed model context (cached until the next append; callers get their own list)."""
        if self._context is None or self._context[0] != self._version:
            self._context = (self._version, build_context(self.entries))
        return list(self._context[1])

    def active_skills(self) -> list[SkillActivationEntry]:
        """The live skill activations (activated and not ended since), in activation order."""
        return list(self._live.values())

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
        """An entry built by its owner (e.g. an `AuditEntry`, services/runtime/audit.py)."""
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
        write, so the file's order, parents and timestamps agree."""
        async with self._appending:
            def write() -> Any:  # in the I/O pool, the guard passed and the disk fence held (write_guard.py)
                if not isinstance(batch[0], LeafEntry):  # a leaf move is not a node: it has no parent
                    batch[0].parent_id = self.leaf_id
                stamp = now_iso()
                for e in batch:
                    e.timestamp = stamp
                return append_unsynced(self.path, [e.model_dump(mode="json", by_alias=True, exclude_none=True)
                                                   for e in batch])

            def written(_: Any) -> None:  # in the file for every reader: in memory too, even if we are cancelled now
                for e in batch:
                    self._index(e)
                    if isinstance(e, LeafEntry):
                        self._set_branch(active_path(self.all))
                    else:
                        self._on_branch(e)
                self._version += 1

            fh = await self._guard.write(write, written)
            await sync_and_close(fh)  # the fence is already released: only the lines' durability is awaited

    def _index(self, entry: TranscriptEntry) -> None:
        """Every entry of every branch: a prompt or injection recorded on an abandoned branch is still
        recorded (a redelivery is only acknowledged, never run again)."""
        self.all.append(entry)
        self._ids.add(entry.id)
        if not isinstance(entry, LeafEntry):
            self._nodes.add(entry.id)
        if isinstance(entry, MessageEntry) and entry.prompt_id:
            self.prompts[entry.prompt_id] = entry.id
        elif isinstance(entry, CustomMessageEntry):
            source, source_id = entry.details.get("source"), entry.details.get("sourceId")
            if isinstance(source, str) and isinstance(source_id, str):
                self.sources[(source, source_id)] = entry.id
            ref, to = entry.details.get("ref"), entry.details.get("toRevision")
            if (entry.details.get("injectionType") == "artifact_update" and isinstance(ref, str)
                    and isinstance(to, int) and to > self.told.get(ref, (-1, ""))[0]):
                self.told[ref] = (to, entry.id)
        elif isinstance(entry, CompactionEntry) and entry.request_id:
            self.compactions.add(entry.request_id)

    def _new_id(self) -> str:
        while True:
            candidate = secrets.token_hex(4)
            if candidate not in self._ids:
                return candidate
