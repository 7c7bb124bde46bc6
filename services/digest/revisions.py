"""Per session and ref: the revision the agent last saw, the current one, and the content needed to diff.

Redis hash `keys.revisions(sid)`: ref -> `RefState` JSON. Content of the revisions still needed (the
seen one, the current one, and those named by a digest that is out but not yet recorded) lives under
`sessions/{sid}/.revisions/{sha256(ref)[:24]}/{revision}`, written atomically; older ones are pruned.
Only the digest builder reads or writes either.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Any, Literal

import redis.asyncio as aioredis
from pydantic import BaseModel, Field, PrivateAttr

from shared.redis import keys
from shared.redis.redis_wire import text
from shared.storage.disk import atomic_write_bytes, session_paths

Actor = Literal["user", "agent", "service"]


class Note(BaseModel):
    """One change after the seen revision that the agent has not been told about yet."""

    actor: Actor
    digest: str | None = None  # the client's own digest text (X-Gamma-Digest)
    from_revision: int | None = None
    seq: int | None = None  # the proxy's change number (shared/streams/causal.py), removed from in flight once delivered
    deleted: bool = False  # this revision removed the ref (a partial flush composes up to it)
    created: bool = False  # the change made the file or deck (none existed before it)


class Carry(BaseModel):
    """A digest of user changes that an agent write landed on top of before it was sent.

    The agent's write advances `seen` past them, but the agent never saw them: keep their text.
    """

    text: str  # the body as `coalesce.compose` rendered it (escaped, client text quoted): reused as it is
    from_revision: int | None
    to_revision: int
    sent_in: int | None = None  # the revision of the digest that carried it out
    seqs: list[int] = Field(default_factory=list)  # change numbers of the user changes it reports


class RefState(BaseModel):
    kind: Literal["file", "document"]
    seen: int | None = None
    seen_known: bool = False  # the content of `seen` is on disk (else the next digest is a dirty marker)
    current: int = 0
    deleted: bool = False
    notes: dict[int, Note] = Field(default_factory=dict)
    carry: Carry | None = None
    sent: list[int] = Field(default_factory=list)  # to_revisions delivered or in the manifest, unrecorded
    pending_since: int | None = None  # ms of the first undelivered live change (bounds the debounce)
    max_seq: int = 0  # the highest change number handled for this ref (shared/streams/causal.py)
    # When the ref's pending digest is due (ms), set by the builder's debounce and written to the due set
    # with the state's save (one round trip, under the session's lock); not part of the stored state.
    _due_ms: int | None = PrivateAttr(default=None)

    @property
    def undelivered(self) -> bool:
        """Changes the agent has not seen and that no digest covering `current` carries yet."""
        return (bool(self.notes) or self.carry is not None) and self.current not in self.sent

    def from_revision(self) -> int | None:
        """The revision a digest is composed from: the one the agent saw; before any, the start (0, or
        None when no producer numbered the change, e.g. a dormant upload).

        Never a producer's later `from_revision` while nothing is seen: revisions before the first
        change handled here were never shown (a live deck write applied whose reply no proxy read
        publishes no change; the retry's change then says "from 1"), and the digest is composed from
        nothing anyway (`seen_known` is False). Taking it marked those revisions told and, once
        recorded, seen ("deck revisions 0..1 never delivered", misacknowledged, in the fault suites).
        """
        if self.carry is not None:
            return self.carry.from_revision
        if self.seen is not None:
            return self.seen
        return 0 if any(n.from_revision is not None for n in self.notes.values()) else None

    def advance_seen(self, revision: int, known: bool, *, recorded: bool) -> None:
        """`recorded`: the agent read a digest up to `revision`; else its own write produced it."""
        if recorded and self.carry is not None and self.carry.sent_in is not None and self.carry.sent_in <= revision:
            self.carry = None
        if self.seen is not None and revision <= self.seen:
            return
        self.seen = revision
        self.seen_known = known
        self.notes = {r: n for r, n in self.notes.items() if r > revision}
        self.sent = [r for r in self.sent if r > revision]

    def undelivered_seqs(self) -> set[int]:
        """Change numbers of the changes no digest that is out (or in the manifest) covers yet."""
        last = max(self.sent, default=None)
        out = {n.seq for r, n in self.notes.items() if n.seq is not None and (last is None or r > last)}
        if self.carry is not None and self.carry.sent_in is None:
            out.update(self.carry.seqs)
        return out

    @property
    def never_known(self) -> bool:
        """Made and removed again before the agent was told of it or saw it: nothing to say."""
        return (self.deleted and self.seen is None and self.carry is None and not self.sent
                and any(n.created for n in self.notes.values()))

    def needed(self) -> set[int]:
        # Revisions of numbered changes not yet out stay: a flush may compose a digest up to one of them.
        keep = set(self.sent) | {self.current} | {r for r, n in self.notes.items() if n.seq is not None}
        if self.seen is not None:
            keep.add(self.seen)
        return keep


def ref_dir(data_dir: Path, sid: str, ref: str) -> Path:
    return session_paths(data_dir, sid).revisions / hashlib.sha256(ref.encode()).hexdigest()[:24]


class RevisionStore:
    def __init__(self, client: aioredis.Redis, data_dir: Path) -> None:
        self._r = client
        self._data_dir = data_dir

    async def load(self, sid: str, ref: str) -> RefState | None:
        raw = await self._r.hget(keys.revisions(sid), ref)
        return RefState.model_validate_json(raw) if raw is not None else None

    async def all(self, sid: str) -> dict[str, RefState]:
        raw = await self._r.hgetall(keys.revisions(sid))
        return {text(k): RefState.model_validate_json(v) for k, v in raw.items()}

    async def save(self, sid: str, ref: str, state: RefState) -> None:
        await self._r.hset(keys.revisions(sid), ref, state.model_dump_json())

    @staticmethod
    def queue_save(pipe: Any, sid: str, ref: str, state: RefState) -> None:
        """`save` on a caller's pipeline (builder.py `_save`)."""
        pipe.hset(keys.revisions(sid), ref, state.model_dump_json())

    # -------------------------------------------------------------- content on the session disk

    def write_content(self, sid: str, ref: str, revision: int, content: bytes) -> None:
        directory = ref_dir(self._data_dir, sid, ref)
        ref_file = directory / "ref"
        if not ref_file.exists():  # lets a person map the hashed directory back to its ref
            atomic_write_bytes(ref_file, ref.encode())
        atomic_write_bytes(directory / str(revision), content)

    def read_content(self, sid: str, ref: str, revision: int | None) -> bytes | None:
        if revision is None:
            return None
        try:
            return (ref_dir(self._data_dir, sid, ref) / str(revision)).read_bytes()
        except FileNotFoundError:
            return None

    def prune(self, sid: str, ref: str, keep: set[int]) -> None:
        directory = ref_dir(self._data_dir, sid, ref)
        if not directory.exists():
            return
        for path in directory.iterdir():
            if path.name.isdigit() and int(path.name) not in keep:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
