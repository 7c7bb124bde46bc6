"""The digest builder: artifact changes in, one coalesced `artifact_update` per ref out.

- agent changes (`actor: "agent"`) advance `seen` and produce nothing (the agent knows its own edits; docs/architecture.md "The digest");
- user / service changes while the session is dormant (no lease) go into the manifest at once;
- while live they wait `GAMMA_DIGEST_DEBOUNCE_MS` (trailing, bounded by `max_wait_ms`) and then enter the
  inbox as one `Injection{source: "artifact", source_id: "{ref}@{to_revision}"}`; a newer edit before the
  record yields a newer digest that supersedes the older one in the runtime's queue;
- on `SessionLive` everything the agent has not recorded is sent at once (no debounce), so with the
  notifications barrier it precedes the woken user message even if it raced the manifest read;
- on `InjectionRecorded` `seen` advances and exactly the consumed manifest entry is cleared.

All of one session's state changes run under a Redis lock, so replicas and the due-loop never interleave
(due.py: the lock and the debounce timer).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis
import structlog
from prometheus_client import CollectorRegistry, Counter

from services.digest.coalesce import NO_NET_CHANGE, actors_line, compose
from services.digest.due import DueLoop, session_lock
from services.digest.handled import queue_mark_handled
from services.digest.in_flight import release_settled
from services.digest.manifest import Manifest
from services.digest.revisions import Carry, Note, RefState, RevisionStore
from services.digest.view import SessionView, read_view
from shared.contracts.base import now_ms
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.pending import PendingArtifact
from shared.contracts.streams.artifacts import ArtifactChange
from shared.contracts.streams.inbox import Injection
from shared.contracts.streams.lifecycle import SessionDormant, SessionLive
from shared.contracts.streams.recorded import InjectionRecorded
from shared.redis import keys
from shared.redis.fence import read_fence
from shared.redis.redis_wire import optional_text
from shared.redis.session_locks import SessionLocks
from shared.storage.blobs import read_blob, remove_blob, sweep_orphans
from shared.streams import causal
from shared.streams.inbox import append
from shared.trust.trusted_blocks import Body, Trusted, artifact_update

log = structlog.get_logger()
SOURCE = "artifact"

def source_id(ref: str, revision: int, corrects_from: int | None = None) -> str:
    """`{ref}@{to}`; a corrected digest (see `on_recorded`) is `{ref}@{to}#{from}`: a new id, so the
    runtime replaces the queued overlapping digest `{ref}@{to}` instead of merging into it."""
    return f"{ref}@{revision}" if corrects_from is None else f"{ref}@{revision}#{corrects_from}"


def parse_source_id(value: str) -> tuple[str, int]:
    ref, sep, rev = value.rpartition("@")
    rev = rev.partition("#")[0]
    if not sep or not rev.isdigit():
        raise ValueError(f"bad artifact source id {value!r}")
    return ref, int(rev)


def change_content(change: ArtifactChange, data_dir: Path) -> bytes | None:
    """The new content as stored for diffing: file bytes (from the change's content blob), or the deck
    as canonical JSON. None when unknown: a blob that is gone or not the named content then makes a
    "changed" digest without a diff, never a diff against the wrong bytes."""
    if change.deleted:
        return None
    if change.kind == "document" and change.document is not None:
        deck = {k: v for k, v in change.document.items() if k != "revision"}  # the revision is not content
        return json.dumps(deck, ensure_ascii=False, sort_keys=True).encode()
    if change.blob is not None and change.sha256 is not None:
        return read_blob(data_dir, change.session_id, change.blob, change.sha256)
    return None


def lease_fence(value: bytes | str | None) -> str | None:
    """The fence of a lease value `{worker_id}:{fence}`."""
    text = optional_text(value)
    return None if text is None else text.rsplit(":", 1)[-1]


class Metrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        reg = registry or CollectorRegistry()
        self.changes = Counter("gamma_digest_changes_total", "Artifact changes handled", ["actor"], registry=reg)
        self.sent = Counter("gamma_digest_injections_total", "Digests appended to inboxes", registry=reg)
        self.manifest = Counter("gamma_digest_manifest_writes_total", "Digests written to the manifest",
                                registry=reg)


class DigestBuilder:
    def __init__(
        self,
        client: aioredis.Redis,
        data_dir: Path,
        *,
        debounce_ms: int = 300,
        max_wait_ms: int | None = None,
        metrics: Metrics | None = None,
        poll_s: float = 0.025,
        blob_orphan_s: float = 3600.0,
    ) -> None:
        self._r = client
        self._data_dir = data_dir
        self._blob_orphan_s = blob_orphan_s
        self.revisions = RevisionStore(client, data_dir)
        self.manifest = Manifest(data_dir)
        self._debounce_ms = debounce_ms
        # A steady stream of edits must not postpone the digest forever.
        self._max_wait_ms = max_wait_ms if max_wait_ms is not None else max(2_000, 10 * debounce_ms)
        self._metrics = metrics or Metrics(None)
        self.due = DueLoop(client, self.flush, poll_s)
        self._local = SessionLocks()  # this process's holders of a session's lock queue here first (due.py)
        self.after_change: Callable[[str, str | None], Awaitable[None]] | None = None

    def locked(self, sid: str) -> contextlib.AbstractAsyncContextManager[None]:
        """The session's digest lock (due.py): held by every change, flush and settle of `sid`."""
        return session_lock(self._r, sid, self._local)

    # ------------------------------------------------------------------ artifact changes

    async def on_change(self, change: ArtifactChange) -> None:
        sid, ref = change.session_id, change.ref
        owed: str | None = None
        async with self.locked(sid):
            view = await read_view(self._r, sid, ref, change)
            if not view.handled:
                if view.deleted:  # erased or being erased: write nothing back
                    return
                # Marked handled, and the flush owed read, in the state's save (one round trip).
                owed = await self._apply(change, view)
        if view.handled:  # a redelivery (handled.py)
            if change.blob is not None:
                await asyncio.to_thread(remove_blob, self._data_dir, sid, change.blob)
            return
        self._metrics.changes.labels(change.actor).inc()
        if change.blob is not None:  # copied into the ref's revisions above; a crash before this leaves an orphan
            await asyncio.to_thread(remove_blob, self._data_dir, sid, change.blob)
        if self.after_change is not None:
            await self.after_change(sid, owed)  # a flush that waited for this change (services/digest/flush.py)

    async def _apply(self, change: ArtifactChange, view: SessionView) -> str | None:
        """The change applied and saved; the flush watermark owed to the session, if any (flush.py)."""
        sid, ref = change.session_id, change.ref
        state = view.state or RefState(kind=change.kind)
        given = change.to_revision
        if given is None and change.document is not None and isinstance(change.document.get("revision"), int):
            given = change.document["revision"]  # the agent's deck write carries the deck's own revision
        revision = given if given is not None and given > state.current else state.current + 1
        known = await asyncio.to_thread(self._store_content, change, revision)
        if change.actor == "agent":
            await self._agent_change(sid, ref, state, revision, known)
        else:
            state.current, state.deleted = revision, change.deleted
            state.notes[revision] = Note(actor=change.actor, digest=change.digest, seq=change.seq,
                                         from_revision=change.from_revision, deleted=change.deleted,
                                         created=change.created)
            state.max_seq = max(state.max_seq, change.seq or 0)
            await self._other_change(sid, ref, state, change, view)
        return await self._save(sid, ref, state, handled=change)

    def _store_content(self, change: ArtifactChange, revision: int) -> bool:
        """Keep the change's content as `revision` (one trip to the I/O pool); False when unknown."""
        content = change_content(change, self._data_dir)
        if content is not None:
            self.revisions.write_content(change.session_id, change.ref, revision, content)
        return content is not None

    async def _agent_change(self, sid: str, ref: str, state: RefState, revision: int, known: bool) -> None:
        if state.undelivered and state.notes:
            # User edits the agent's write landed on before their digest went out: keep their text.
            body = await self._compose(sid, ref, state)
            if body is not None:
                seqs = sorted(state.undelivered_seqs())  # reported by the carry now, not by the notes
                state.carry = Carry(text=body.text, from_revision=state.from_revision(), to_revision=state.current,
                                    seqs=seqs)
        state.current, state.deleted = revision, False
        state.advance_seen(revision, known, recorded=False)
        await asyncio.to_thread(self.manifest.clear_upto, sid, ref, revision)
        if state.undelivered:
            await self._route(sid, ref, state, immediate=False)
        else:
            state.pending_since = None
            await self._r.zrem(keys.DIGEST_DUE, json.dumps([sid, ref]))

    async def _other_change(self, sid: str, ref: str, state: RefState, change: ArtifactChange,
                            view: SessionView) -> None:
        lease, live = view.lease, view.live
        if lease is None:
            await self._to_manifest(sid, ref, state)  # made while dormant
            return
        live_fence = optional_text(live.get(b"fence"))
        if live_fence != lease_fence(lease):
            # The SessionLive of this lease is not handled yet; its handler sends this at once. Keep it
            # due anyway (at the debounce bound): if that SessionLive never gets handled (dead-lettered
            # while Redis was away), the note must not stay parked forever.
            await self._route(sid, ref, state, immediate=False, delay_ms=self._max_wait_ms)
            return
        since = int(live.get(b"since") or 0)
        await self._route(sid, ref, state, immediate=change.ts <= since)

    async def _route(self, sid: str, ref: str, state: RefState, *, immediate: bool,
                     delay_ms: int | None = None) -> None:
        if immediate:
            await self._send(sid, ref, state)
            return
        now = now_ms()
        if state.pending_since is None:
            state.pending_since = now
        delay = self._debounce_ms if delay_ms is None else delay_ms
        state._due_ms = min(now + delay, state.pending_since + self._max_wait_ms)  # queued by `_save`

    # ------------------------------------------------------------------ producing digests

    async def _compose(self, sid: str, ref: str, state: RefState) -> Trusted | None:
        seen, current = await asyncio.to_thread(self._read_pair, sid, ref, state.seen, state.current)
        return compose(state, seen, current)

    def _read_pair(self, sid: str, ref: str, seen: int | None, current: int) -> tuple[bytes | None, bytes | None]:
        return self.revisions.read_content(sid, ref, seen), self.revisions.read_content(sid, ref, current)

    async def _digest(self, sid: str, ref: str, state: RefState) -> tuple[str, int | None] | None:
        """(content, from_revision) or None when the agent already has the current content."""
        body: Body | None = None if state.never_known else await self._compose(sid, ref, state)
        if body is None and (state.notes or state.carry is not None) and not state.never_known:
            # Edits that cancel out (a save repeated after a lost answer, an edit undone) still go out:
            # `seen` advances only when the agent records a digest or writes itself. Advancing it here
            # marked revisions seen that no digest showed (5..7 recorded, then 8..9: 8 never shown),
            # and with an earlier digest still out it left the agent believing the undone content.
            body = actors_line(state) + "\n\n" + NO_NET_CHANGE
        if body is None:
            # Nothing the agent has not been told: its view equals the current one.
            state.advance_seen(state.current, not state.deleted, recorded=False)
            state.pending_since = None
            return None
        from_revision = state.from_revision()
        return artifact_update(ref, from_revision, state.current, body), from_revision

    async def _send(self, sid: str, ref: str, state: RefState, *, correction: bool = False) -> None:
        digest = await self._digest(sid, ref, state)
        if digest is None:
            return
        content, from_revision = digest
        sent_id = source_id(ref, state.current, from_revision if correction else None)
        await append(self._r, Injection(
            session_id=sid, injection=RuntimeInjection(kind="artifact_update", content=content),
            source=SOURCE, source_id=sent_id, ref=ref,
            from_revision=from_revision, to_revision=state.current,
        ))
        self._mark_sent(state)
        self._metrics.sent.inc()
        log.info("digest_sent", session_id=sid, ref=ref, from_revision=from_revision, to_revision=state.current)

    async def _to_manifest(self, sid: str, ref: str, state: RefState) -> None:
        digest = await self._digest(sid, ref, state)
        if digest is None:
            await asyncio.to_thread(self.manifest.clear_upto, sid, ref, state.current)
            return
        content, from_revision = digest
        entry = PendingArtifact(digest=content, from_revision=from_revision, to_revision=state.current,
                                source_id=source_id(ref, state.current))
        await asyncio.to_thread(self.manifest.put, sid, ref, entry)
        self._mark_sent(state)
        self._metrics.manifest.inc()
        log.info("digest_manifest", session_id=sid, ref=ref, from_revision=from_revision, to_revision=state.current)

    @staticmethod
    def _mark_sent(state: RefState) -> None:
        if state.current not in state.sent:
            state.sent.append(state.current)
        if state.carry is not None and state.carry.sent_in is None:
            state.carry.sent_in = state.current
        state.pending_since = None

    async def _save(self, sid: str, ref: str, state: RefState, *, handled: ArtifactChange | None = None) -> str | None:
        """The ref's state saved and its settled changes released. With `handled`: that change marked
        handled (handled.py) and the flush watermark owed read (flush.py), in the same round trip."""
        await asyncio.to_thread(self.revisions.prune, sid, ref, state.needed())
        # In order: the read of the changes in flight follows the state's write.
        pipe = self._r.pipeline(transaction=False)
        self.revisions.queue_save(pipe, sid, ref, state)
        if state.max_seq:
            pipe.zrangebyscore(keys.changes_in_flight(sid), "-inf", state.max_seq)
        owed_at = None
        if handled is not None:
            queue_mark_handled(pipe, handled)
            owed_at = len(pipe)
            pipe.get(keys.digest_flush(sid))
        if state._due_ms is not None:  # a debounce `_route` started (the due loop takes the lock to flush)
            pipe.zadd(keys.DIGEST_DUE, {json.dumps([sid, ref]): state._due_ms})
            state._due_ms = None
        replies = await pipe.execute()
        flying = [causal.parse_member(m) for m in replies[1]] if state.max_seq else None
        await release_settled(self._r, sid, ref, state, flying)
        return optional_text(replies[owed_at]) if owed_at is not None else None

    async def flush(self, sid: str, ref: str) -> None:
        """A debounce window ended: send (live) or write the manifest (the session went dormant meanwhile)."""
        async with self.locked(sid):
            view = await read_view(self._r, sid, ref)
            if view.deleted:  # erased or being erased: write nothing back
                return
            state = view.state
            if state is None or not state.undelivered:
                return
            if view.lease is not None:
                await self._send(sid, ref, state)
            else:
                await self._to_manifest(sid, ref, state)
            await self._save(sid, ref, state)

    async def run_due(self) -> None:
        await self.due.run()

    # ------------------------------------------------------------------ lifecycle and records

    async def on_live(self, event: SessionLive) -> None:
        sid = event.session_id
        async with self.locked(sid):
            if await self._stale_fence(sid, event.fence):
                # A SessionLive retried after a newer lease was taken (the claimer redelivers entries a
                # Redis restart failed): recording its fence would make every later change of the newer
                # lease look "SessionLive not handled yet" and park it. The newer lease's own SessionLive
                # sends what is unrecorded; if the session went dormant since, the manifest gets it.
                log.warning("digest_stale_live_ignored", session_id=sid, fence=event.fence)
                return
            await self._r.hset(keys.digest_live(sid), mapping={"fence": str(event.fence), "since": now_ms()})
            for ref, state in (await self.revisions.all(sid)).items():
                if state.notes or state.carry is not None:
                    # Unrecorded, whether in the manifest, sent before a crash, or made while waking:
                    # the runtime records one copy per source_id.
                    await self._send(sid, ref, state)
                    await self._save(sid, ref, state)

    def _clear_recorded(self, sid: str, ref: str, revision: int, tracked: bool) -> bool:
        """The manifest entry up to `revision` cleared; whether its content is known (when `tracked`)."""
        self.manifest.clear_upto(sid, ref, revision)
        return tracked and self.revisions.read_content(sid, ref, revision) is not None

    async def _stale_fence(self, sid: str, fence: int) -> bool:
        """A newer lease was granted than the one `fence` belongs to (fences only grow: HINCRBY)."""
        latest = await read_fence(self._r, sid)
        return latest is not None and fence < latest

    async def on_dormant(self, event: SessionDormant) -> None:
        sid = event.session_id
        async with self.locked(sid):
            fence = optional_text(await self._r.hget(keys.digest_live(sid), "fence"))
            if fence == str(event.fence):
                await self._r.delete(keys.digest_live(sid))
        # Blobs of changes that were never published (a crash, a refused or abandoned live write).
        await asyncio.to_thread(sweep_orphans, self._data_dir, sid, self._blob_orphan_s)

    async def on_recorded(self, event: InjectionRecorded) -> None:
        if event.source != SOURCE:
            return
        try:
            ref, revision = parse_source_id(event.source_id)
        except ValueError:
            log.warning("recorded_bad_source_id", session_id=event.session_id, source_id=event.source_id)
            return
        ref = event.ref or ref
        revision = event.to_revision if event.to_revision is not None else revision
        sid = event.session_id
        async with self.locked(sid):
            view = await read_view(self._r, sid, ref)
            if view.deleted:  # erased or being erased: write nothing back
                return
            state = view.state
            known = await asyncio.to_thread(self._clear_recorded, sid, ref, revision, state is not None)
            if state is None:
                return
            advanced = state.seen is None or revision > state.seen
            state.advance_seen(revision, known, recorded=True)
            live = view.lease is not None
            if state.undelivered:  # a newer edit arrived meanwhile: it still has to reach the agent
                if live:
                    await self._route(sid, ref, state, immediate=False)
                else:
                    await self._to_manifest(sid, ref, state)
            elif live and advanced and state.sent:
                # A newer digest is out that was composed from the older `seen` while this one was out
                # too: it repeats what the agent just recorded (0..2 recorded, 0..3 out). Send it again
                # from the recorded revision under a new source id. The runtime, which knows what it
                # recorded, restates or drops the overlapping one (protocol.artifact_recorded); this
                # correction then replaces the restated marker with the precise digest if still queued.
                await self._send(sid, ref, state, correction=True)
            elif not live and self.manifest.get(sid, ref) is not None:
                await self._to_manifest(sid, ref, state)  # restate the newer entry from the new `seen`
            await self._save(sid, ref, state)
