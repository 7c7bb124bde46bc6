"""A live rewind (`POST /sessions/{id}/rewind`, `edit_of`, a branch switch): the rules are in
shared/history/rewind.py; this applies them to the live session (docs/architecture.md "Snapshots, rewind and
fork"). The active run is aborted first; then the disk is restored and the leaf moved under the lease,
and the agent's context is rebuilt from the new branch: todo as of the entry (todo.json restored),
active skills and loaded knowledge as the branch records them, the trusted note at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

import structlog

from services.runtime.store.snapshots import SessionSnapshots
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript, now_iso
from services.runtime.store.write_guard import Guard
from shared.contracts.streams.events import EventType, RunAbortedData
from shared.contracts.streams.inbox import Rewind
from shared.history import rewind as rw
from shared.storage.snapshots import ScanTooLarge
from shared.streams.inbox import InboxEntry

log = structlog.get_logger()


class Files(Protocol):
    async def refresh_viewable(self, announce: bool = False) -> None: ...


class Context(Protocol):
    def restore_context(self) -> None: ...


class Aborts(Protocol):
    async def abort(self, reason: Literal["user", "interrupt"]) -> RunAbortedData | None: ...


class Replies(Protocol):
    async def event(self, type: EventType, data: dict[str, Any] | None = None) -> str | None: ...

    async def reply(self, request_id: str, status: int, body: dict[str, Any]) -> None: ...


class Rewinder:
    def __init__(self, sid: str, transcript: Transcript, todo: TodoController, turns: Context,
                 snapshots: SessionSnapshots, aborts: Aborts, files: Files, *, outbox: Replies,
                 guard: Guard, ack: Callable[[str | None], Awaitable[None]]) -> None:
        self.sid = sid
        self.transcript = transcript
        self.todo = todo
        self.turns = turns
        self.snapshots = snapshots
        self.aborts = aborts  # the active run ends first
        self.files = files  # the viewable files, listed again once the workspace is restored
        self.outbox = outbox
        self.guard = guard
        self.ack = ack

    async def on_rewind(self, entry: InboxEntry, m: Rewind) -> None:
        try:
            body = await self.rewind(m.entry_id, m.reason, m.edited_id)
            await self.outbox.reply(m.request_id, 200, body)
        except rw.RewindRefused as exc:
            body = {"error": exc.message, **({"detail": exc.detail} if exc.detail else {})}
            await self.outbox.reply(m.request_id, exc.status, body)
        await self.ack(entry.entry_id)

    async def rewind(self, target_id: str, reason: rw.RewindReason, edited_id: str | None = None) -> dict[str, Any]:
        t = self.transcript
        branch = await t.branch_to(target_id)  # the window's, or read by offset (shared/history/transcript_branch.py)
        if branch is None:
            raise rw.RewindRefused(404, f"no entry {target_id!r} in this session's transcript")
        aborted = await self.aborts.abort("user")
        from_id = t.leaf_id
        try:  # the abandoned leaf's state: a switch back restores it
            await self.snapshots.take("rewind_from", too_large=True)
        except ScanTooLarge as exc:  # the disk's state is unknown: restoring from the last record would lie
            raise rw.too_large(self.snapshots.limits, exc) from exc
        store = self.snapshots.store
        edited = await t.branch_to(edited_id) if edited_id else None
        try:  # from the window when it holds the target and the snapshot that records it
            record = rw.state_record_of(store, branch.nodes, edited.nodes if edited else None)
        except rw.RewindRefused:
            if not branch.partial and not (edited and edited.partial):
                raise
            whole = await t.read_branch(target_id) or branch  # the branch from the root, read by offset
            sent = await t.read_branch(edited_id) if edited_id else None
            record = rw.state_record_of(store, whole.nodes, sent.nodes if sent else None)
        moves = rw.leaf_moves(branch.tail, from_id, reason, t.new_id, now_iso())
        intent = await self.guard.write(lambda: rw.begin(self.snapshots.paths, record, target_id, moves))
        changed = await self.finish(intent)
        log.info("session_rewound", session_id=self.sid, target=target_id, from_id=from_id, changed=changed,
                 aborted=aborted is not None)
        body = {"entry_id": target_id, "leaf_id": t.leaf_id, "from_id": from_id, "changed": changed,
                "aborted_run_id": aborted.run_id if aborted else None}
        await self.outbox.event("rewound", body)
        return body

    async def finish(self, intent: rw.Intent) -> int:
        """Steps (4)-(6) of shared/history/rewind.py: also what a wake does with an intent a crash left."""
        t = self.transcript
        store = self.snapshots.store
        changed = await self.guard.write(lambda: rw.restore_files(store, intent))
        for entry in intent.parsed():
            if not t.has(entry.id):
                await t.append_entry(entry)
        await self.guard.write(lambda: rw.done(self.snapshots.paths))
        self.todo.reload()
        self.turns.restore_context()
        await self.files.refresh_viewable(announce=True)
        return changed

    async def finish_pending(self, *, read: bool = True, intent: rw.Intent | None = None) -> None:
        """A rewind a crash cut short (shared/history/rewind.py), finished at the wake. `read=False`:
        `intent` is what the wake's read found (session_files.py), not read again."""
        if read:
            intent = await asyncio.to_thread(rw.pending, self.snapshots.paths)  # off the loop: a wake's read
        if intent is not None:
            log.warning("rewind_resumed", session_id=self.sid, target=intent.target_id)
            await self.snapshots.take("resumed", force=True)  # the disk as the crash left it
            try:
                await self.finish(intent)
            except rw.RewindRefused as exc:  # its snapshot is gone: the session goes on as the crash left it
                log.error("rewind_not_resumable", session_id=self.sid, error=exc.message)
