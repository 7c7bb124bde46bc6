"""Scoped workspace knowledge in a session (seed: "Follow-up: Scoped knowledge"; rules in shared/history/knowledge.py).

- At each user prompt (`PromptKnowledge.hints`) the owner's notes are read from Redis (the proxy
  writes them), ranked against the prompt, and the candidates the session has not loaded at their
  current revision go in ONE trusted `<knowledge_hints>` message before the user message: pointers,
  no bodies. A note the session loaded that changed or was deleted since gets its `workspace_update`
  there too, unless the proxy's announcement of it is already recorded or queued (same source id).
- `read_workspace_rule({knowledgeId})` returns the body; a body past the inline limit is written to
  the workspace file `knowledge/{id}.md` and the result names that path.
- How long loaded knowledge stays active (the seed's open question): from its `read_workspace_rule`
  result until the end of the session, or until a `workspace_update` reports a newer revision or its
  deletion (that copy is retired; the hints list the note again when a prompt matches it). Active
  notes are derived from the transcript alone (`loaded_notes`), so a wake and every compaction
  restore them like active skills: compaction re-adds each as a `gamma.active_knowledge` anchor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter

from services.runtime.store.transcript import Transcript
from services.runtime.tools.workspace_rule import TOOL_NAME
from shared.contracts.records.messages import AgentMessage, CustomMessage
from shared.contracts.records.transcript import CustomMessageEntry, MessageEntry, TranscriptEntry
from shared.history.knowledge import (
    KnowledgeNote,
    get_note,
    hints_block,
    notes_key,
    notes_of,
    parse_source_id,
    revisions_key,
    select_notes,
    source_id,
    update_text,
)
from shared.redis import keys
from shared.redis.redis_wire import text
from shared.trust.trusted_blocks import lines, quoted, render

ANCHOR_TYPE = "gamma.active_knowledge"
_COUNTERS: dict[CollectorRegistry, Counter] = {}
Notes = tuple[list[KnowledgeNote], dict[str, int]]
log = structlog.get_logger()


def hints_counter(registry: CollectorRegistry) -> Counter:
    if registry not in _COUNTERS:
        _COUNTERS[registry] = Counter("gamma_knowledge_hints", "Knowledge pointers injected at user prompts, "
                                      "by note source", ["source"], registry=registry)
    return _COUNTERS[registry]


@dataclass
class LoadedNote:
    id: str
    revision: int
    name: str
    scope: str
    source: str
    content: str  # the tool result as the model read it (the body, or the pointer to its file)


def loaded_notes(entries: Sequence[TranscriptEntry]) -> dict[str, LoadedNote]:
    """Notes active in the session: read with the tool and not retired by a newer workspace_update."""
    active: dict[str, LoadedNote] = {}
    for e in entries:
        if isinstance(e, MessageEntry) and getattr(e.message, "tool_name", None) == TOOL_NAME:
            d = getattr(e.message, "details", None) or {}
            if not getattr(e.message, "is_error", False) and isinstance(d.get("knowledgeId"), str):
                active[d["knowledgeId"]] = LoadedNote(d["knowledgeId"], int(d.get("revision", 0)), str(d.get("name", "")),
                                                      str(d.get("scope", "")), str(d.get("source", "workspace")),
                                                      e.message.text())  # type: ignore[union-attr]
        elif isinstance(e, CustomMessageEntry) and e.details.get("injectionType") == "workspace_update":
            parsed = parse_source_id(str(e.details.get("sourceId", "")))
            if parsed and parsed[0] in active and active[parsed[0]].revision < parsed[1]:
                del active[parsed[0]]
    return active


def active_knowledge(n: LoadedNote) -> str:
    """The note as the model read it (the note author's text): quoted, with name and scope as attributes."""
    return render("active_knowledge", {"id": n.id, "revision": n.revision, "name": n.name, "scope": n.scope},
                  lines("You loaded this workspace knowledge note earlier in this session; it still applies "
                        "within its scope. What you read then:", quoted(n.source, n.content)))


def knowledge_anchors(entries: Sequence[TranscriptEntry]) -> list[CustomMessage]:
    """What a compaction restores: every active note, as the model last read it."""
    return [CustomMessage(
        custom_type=ANCHOR_TYPE, display=False, content=active_knowledge(n),
        details={"trusted": True, "injectionType": "active_knowledge", "source": "system", "knowledgeId": n.id,
                 "revision": n.revision}) for n in loaded_notes(entries).values()]


class KnowledgeReader:
    """The session owner's notes, read from Redis (the owner from the session row, read once)."""

    def __init__(self, client: Any, sid: str) -> None:
        self.client = client
        self.sid = sid
        self._owner: str | None = None

    async def owner(self) -> str | None:
        if self._owner is None:
            raw = await self.client.hget(keys.session_row(self.sid), "owner")
            self._owner = text(raw) if raw else None
        return self._owner

    async def notes(self) -> Notes:
        """The notes, and every note id's last revision (deleted notes included): one round trip
        (both keys carry the owner's hash tag: one Cluster slot)."""
        owner = await self.owner()
        if owner is None:
            return [], {}
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(notes_key(owner))
            pipe.hgetall(revisions_key(owner))
            raw, revisions = await pipe.execute()
        return notes_of(raw), {text(k): int(v) for k, v in revisions.items()}

    async def note(self, note_id: str) -> KnowledgeNote | None:
        owner = await self.owner()
        return await get_note(self.client, owner, note_id) if owner else None


class PromptKnowledge:
    """The prompt-time hook: hints and missed workspace_updates, for before the user message (an input
    of the prompt's turn, turn_order.py)."""

    def __init__(self, reader: KnowledgeReader, transcript: Transcript, top_k: int, min_score: float,
                 registry: CollectorRegistry | None) -> None:
        self.reader = reader
        self.transcript = transcript
        self.top_k = top_k
        self.min_score = min_score
        self.registry = registry

    async def fetch(self) -> Notes:
        """The owner's notes, read before the dispatcher decides how to route the prompt (so no await
        separates that decision from its action). A failed read means no hints, never a lost prompt."""
        try:
            return await self.reader.notes()
        except Exception:  # noqa: BLE001 - hints are advisory
            log.warning("knowledge_read_failed", session_id=self.reader.sid, exc_info=True)
            return [], {}

    def hints(self, prompt: str, fetched: Notes) -> list[AgentMessage]:
        notes, revisions = fetched
        if not notes and not revisions:
            return []
        loaded = loaded_notes(self.transcript.loads)
        current = {n.id: n for n in notes}
        extra: list[AgentMessage] = self._missed_updates(loaded, current, revisions)
        hinted = [n for n, _ in select_notes(prompt, notes, self.top_k, self.min_score)
                  if n.id not in loaded or loaded[n.id].revision < n.revision]
        if hinted:
            extra.append(CustomMessage(
                custom_type="gamma.knowledge_hints", content=hints_block(hinted), display=False,
                details={"trusted": True, "injectionType": "knowledge_hints", "source": "system",
                         "notes": [{"id": n.id, "revision": n.revision} for n in hinted]}))
            if self.registry is not None:
                for n in hinted:
                    hints_counter(self.registry).labels(source=n.source).inc()
        return extra

    def _missed_updates(self, loaded: dict[str, LoadedNote], current: dict[str, KnowledgeNote],
                        revisions: dict[str, int]) -> list[AgentMessage]:
        """A loaded note changed or deleted without its workspace_update in this session (it changed
        while the session was dormant, or during the wake): the update, from the runtime itself. One the
        proxy's announcement already queued is dropped where the turn takes from the queue
        (pending_queue.py `take_for_prompt`)."""
        out: list[AgentMessage] = []
        for note_id, copy in loaded.items():
            rev = revisions.get(note_id, copy.revision)
            if rev <= copy.revision:
                continue
            sid = source_id(note_id, rev)
            if ("system", sid) in self.transcript.sources:
                continue
            out.append(CustomMessage(
                custom_type="gamma.workspace_update", content=update_text(note_id, rev, current.get(note_id)),
                display=False, details={"trusted": True, "injectionType": "workspace_update", "source": "system",
                                        "sourceId": sid}))
        return out
