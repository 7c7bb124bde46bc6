"""A live rewind (`POST /sessions/{id}/rewind`, `edit_of`, a branch switch): the rules are in
shared/rewind.py; this applies them to the live session (docs/architecture.md "Snapshots, rewind and
fork"). The active run is aborted first; then the disk is restored and the leaf moved under the lease,
and the agent's context is rebuilt from the new branch: todo as of the entry (todo.json restored),
active skills and loaded knowledge as the branch records them, the trusted note at the end.
"""

from __future__ import annotations

from typing import Any, Protocol

import structlog

from shared import rewind as rw
from shared.contracts.inbox import Rewind
from shared.inbox import InboxEntry

from .abort import RunAborter
from .events import Outbox
from .protocol import SessionProtocolController
from .snapshots import SessionSnapshots
from .todo import TodoController
from .transcript import Transcript, now_iso

log = structlog.get_logger()


class RewindHost(Protocol):
    sid: str
    transcript: Transcript
    todo: TodoController
    protocol: SessionProtocolController
    outbox: Outbox
    snapshots: SessionSnapshots
    aborts: RunAborter
    viewable_files: list[str]

    async def guard(self) -> None: ...

    async def ack(self, entry_id: str | None) -> None: ...

    async def refresh_files(self) -> None: ...


class Rewinder:
    def __init__(self, host: RewindHost) -> None:
        self.h = host

    async def on_rewind(self, entry: InboxEntry, m: Rewind) -> None:
        try:
            body = await self.rewind(m.entry_id, m.reason)
            await self.h.outbox.reply(m.request_id, 200, body)
        except rw.RewindRefused as exc:
            body = {"error": exc.message, **({"detail": exc.detail} if exc.detail else {})}
            await self.h.outbox.reply(m.request_id, exc.status, body)
        await self.h.ack(entry.entry_id)

    async def rewind(self, target_id: str, reason: rw.RewindReason) -> dict[str, Any]:
        h, t = self.h, self.h.transcript
        if not t.is_node(target_id):
            raise rw.RewindRefused(404, f"no entry {target_id!r} in this session's transcript")
        aborted = await h.aborts.abort("user")
        from_id = t.leaf_id
        await h.snapshots.take("rewind_from")  # the abandoned leaf's state: a switch back restores it
        store = h.snapshots.store
        branch = t.branch_to(target_id)
        record = rw.state_record(store, branch)
        moves = rw.leaf_moves(branch[-1], from_id, reason, t.new_id, now_iso())
        await h.guard()
        intent = rw.begin(h.snapshots.paths, record, target_id, moves)
        changed = await self.finish(intent)
        log.info("session_rewound", session_id=h.sid, target=target_id, from_id=from_id, changed=changed,
                 aborted=aborted is not None)
        body = {"entry_id": target_id, "leaf_id": t.leaf_id, "from_id": from_id, "changed": changed,
                "aborted_run_id": aborted.run_id if aborted else None}
        await h.outbox.event("rewound", body)
        return body

    async def finish(self, intent: rw.Intent) -> int:
        """Steps (4)-(6) of shared/rewind.py: also what a wake does with an intent a crash left."""
        h, t = self.h, self.h.transcript
        store = h.snapshots.store
        await h.guard()
        changed = rw.restore_files(store, intent)
        for entry in intent.parsed():
            if not t.has(entry.id):
                await t.append_entry(entry)
        await h.guard()
        rw.done(h.snapshots.paths)
        h.todo.reload()
        h.protocol.restore_context()
        await h.refresh_files()
        return changed

    async def finish_pending(self) -> None:
        intent = rw.pending(self.h.snapshots.paths)
        if intent is not None:
            log.warning("rewind_resumed", session_id=self.h.sid, target=intent.target_id)
            await self.h.snapshots.take("resumed", force=True)  # the disk as the crash left it
            try:
                await self.finish(intent)
            except rw.RewindRefused as exc:  # its snapshot is gone: the session goes on as the crash left it
                log.error("rewind_not_resumable", session_id=self.h.sid, error=exc.message)
