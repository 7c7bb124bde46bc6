"""Forwarded live writes (docs/integration.md "Forwarded live writes"): UiUpdate, FileWrite,
DocumentEdit, FileDelete, DocumentDelete. Each is applied under the lease, made durable, answered on
the reply key, then acked.

Files and documents go through the write model the proxy uses while the session is dormant
(`shared.ui.write_model`); the UI update goes to the live Yjs document (`uistate.UiDoc`), under the
same rule (`shared.ui.uirules`, `shared.ui.uimerge`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import structlog

from services.runtime.live.state import SessionState
from services.runtime.store.write_guard import Guard
from services.runtime.ui.liveui import LiveUi
from shared.contracts.streams.events import EventType
from shared.contracts.streams.inbox import DocumentDelete, DocumentEdit, FileDelete, FileWrite, UiUpdate
from shared.redis import revnum
from shared.settings import Settings
from shared.storage.blobs import read_blob
from shared.storage.disk import DiskError, SessionPaths, check_size, split_workspace_path
from shared.storage.quota import WorkspaceQuota
from shared.streams.inbox import InboxEntry
from shared.ui import write_model
from shared.ui.form_rules import check_client_form
from shared.ui.uirules import UiRefused, validate_snapshot
from shared.ui.write_model import Refused

log = structlog.get_logger()
T = TypeVar("T")


class RecordedWrite(Protocol):
    """A client's write and, between runs, the snapshot that records it (snapshots.py `after_write`):
    `changed(result)` says whether the write changed the disk."""

    async def __call__(self, write: Callable[[], T], changed: Callable[[T], bool]) -> T: ...


class WriteOutbox(Protocol):
    async def event(self, type: EventType, data: dict[str, Any] | None = None) -> str | None: ...
    async def reply(self, request_id: str, status: int, body: dict[str, Any]) -> None: ...


class WorkspaceFiles(Protocol):
    """The viewable-file projection and the limits of a write (tool_host.py)."""

    @property
    def max_file_bytes(self) -> int: ...
    @property
    def workspace_quota(self) -> WorkspaceQuota: ...
    @property
    def viewable_files(self) -> list[str]: ...
    def track(self, *paths: str, deleted: bool = False) -> None: ...
    def client_saved(self, path: str, revision: int | None) -> None: ...


class WriteHandlers:
    def __init__(self, state: SessionState, paths: SessionPaths, ui: LiveUi, files: WorkspaceFiles,
                 outbox: WriteOutbox, guard: Guard, ack: Callable[[str | None], Awaitable[None]],
                 client: Any, settings: Settings, after_ui_sync: Callable[[], Awaitable[None]],
                 recorded: RecordedWrite | None = None) -> None:
        """`after_ui_sync`: runs after a client's UI change once the wake barrier passed (a question
        form the client just answered is delivered to the agent). `recorded`: how a file or document
        write is made and recorded (the session's snapshot of an upload); none: the guard's write."""
        self.state = state
        self.paths = paths
        self.ui = ui
        self.files = files
        self.outbox = outbox
        self.guard = guard
        self.ack = ack
        self.client = client  # Redis: numbers the writes (shared/redis/revnum.py)
        self.data_dir = settings.storage.data_dir
        self.trace = settings.server.trace_inbox
        self._after_ui_sync = after_ui_sync
        self._recorded = recorded

    async def _write(self, write: Callable[[], T]) -> T:
        """In the I/O pool with the disk fence held (write_guard.py), with its snapshot when one is due."""
        if self._recorded is None:
            return await self.guard.write(write)
        return await self._recorded(write, lambda result: not isinstance(result, Refused))

    async def _answer(self, entry: InboxEntry, request_id: str, status: int, body: dict[str, Any]) -> None:
        # The effect is durable already: ack first, so whoever reads the reply sees a clean inbox.
        await self.ack(entry.entry_id)
        await self.outbox.reply(request_id, status, body)

    async def _refuse(self, entry: InboxEntry, request_id: str, refused: Refused) -> None:
        await self._answer(entry, request_id, refused.status, refused.body())

    async def ui_update(self, entry: InboxEntry, m: UiUpdate) -> None:
        """Merge the client's Yjs update. When it changes nothing but carries a snapshot (a client that
        speaks snapshots only), the snapshot is applied instead. Both go through the rule the proxy
        applies while dormant (shared.ui.uirules): a refused change changes nothing (400/413/422), and a
        snapshot that forges or rewrites the agent's form is a 403 live as dormant, applied or not."""
        raw = write_model.decode_update(m.update)
        if isinstance(raw, Refused):
            await self._refuse(entry, m.request_id, raw)
            return
        try:
            snapshot = None if m.snapshot is None else validate_snapshot(m.snapshot, self.ui.limits)
            doc = await self.ui.document()
            if snapshot is not None:  # whether or not it is applied, as the dormant sync checks it
                check_client_form(doc.snapshot(), snapshot)  # (shared/ui/write_model.py sync_stored_ui)
            update = await doc.apply_update(raw)
            if not update and snapshot is not None:
                update = await doc.apply_snapshot(snapshot)
        except UiRefused as exc:
            await self._refuse(entry, m.request_id, Refused.of(exc))
            return
        if update:
            await self.ui.persist_ui()
        await self.ui.publish_ui(update)
        await self._answer(entry, m.request_id, 200, {"snapshot": doc.snapshot(),
                                                      "update": doc.full_update_b64()})
        if self.state.barrier_passed:
            await self._after_ui_sync()

    def _blob(self, m: FileWrite) -> bytes | Refused:
        """The written content the proxy staged (410: it gave the request up and removed it). In the
        I/O pool, in the write's own hand-off."""
        try:
            split_workspace_path(m.path, for_write=True)  # a name that can never be written: before any I/O
            data = read_blob(self.data_dir, self.state.sid, m.blob, m.sha256)
            if data is not None:
                check_size(data, self.files.max_file_bytes)
        except DiskError as exc:
            return Refused.of(exc)
        if data is None:  # the proxy removed it when it stopped waiting: nobody wants this write now
            return Refused(410, "the written content is gone: the request was given up (timed out) before it "
                                "was applied")
        return data

    def _write_file(self, m: FileWrite) -> write_model.FileWritten | Refused:
        data = self._blob(m)
        if isinstance(data, Refused):
            return data
        # The quota check walks the workspace (bounded, shared/storage/walk.py).
        return write_model.write_file(self.paths.workspace, m.path, data, max_bytes=self.files.max_file_bytes,
                                      quota=self.files.workspace_quota, must_exist=False)

    async def file_write(self, entry: InboxEntry, m: FileWrite) -> None:
        t = [time.time()]
        written = await self._write(lambda: self._write_file(m))  # the blob's read, the write, its snapshot
        t.append(time.time())
        if isinstance(written, Refused):  # gone, a directory in the way, a file as a parent, over quota
            await self._refuse(entry, m.request_id, written)
            return
        self.files.track(written.path)
        revision = await self._next_revision("file:" + written.path)
        self.files.client_saved(written.path, revision)  # the agent's next write of it must read it first
        t.append(time.time())
        await self._answer(entry, m.request_id, 200, {"path": written.path, "size": written.size, "revision": revision,
                                                      "created": written.created})
        if self.trace:  # bench/e2e.py --trace: where a file write's time goes
            t.append(time.time())
            steps = ("write_ms", "revision_ms", "answer_ms")  # write: the guard, the blob's read and the write
            log.info("file_write_timing", session_id=self.state.sid, entry_id=entry.entry_id,
                     **{k: round((b - a) * 1000, 1) for k, a, b in zip(steps, t, t[1:], strict=False)})

    async def _next_revision(self, ref: str) -> int:
        """The revision the digest will record for this write (shared/redis/revnum.py)."""
        return await revnum.next_revision(self.client, self.state.sid, ref)

    async def document_edit(self, entry: InboxEntry, m: DocumentEdit) -> None:
        stored = await self._write(
            lambda: write_model.edit_document(self.paths, m.doc, m.op, m.document, m.if_match, create=True))
        if isinstance(stored, Refused):
            await self._refuse(entry, m.request_id, stored)
            return
        await self._answer(entry, m.request_id, 200, stored.model_dump())

    async def file_delete(self, entry: InboxEntry, m: FileDelete) -> None:
        """Remove a workspace file with the function the proxy uses while dormant (404, 409 alike)."""
        tree = self.files.workspace_quota.limits if m.recursive else None
        removed = await self._write(lambda: write_model.remove_file(self.paths.workspace, m.path, tree=tree))
        if isinstance(removed, Refused):
            await self._refuse(entry, m.request_id, removed)
            return
        self.files.track(removed.path, *(removed.files or ()), deleted=True)
        if removed.files is None:
            revision = await self._next_revision("file:" + removed.path)
            await self._answer(entry, m.request_id, 200, {"path": removed.path, "deleted": True, "revision": revision})
            return
        files = [{"path": p, "revision": await self._next_revision("file:" + p)} for p in removed.files]
        await self._answer(entry, m.request_id, 200, {"path": removed.path, "deleted": True, "revision": None,
                                                      "files": files})

    async def document_delete(self, entry: InboxEntry, m: DocumentDelete) -> None:
        removed = await self._write(lambda: write_model.delete_document(self.paths, m.doc, m.if_match))
        if isinstance(removed, Refused):
            await self._refuse(entry, m.request_id, removed)
            return
        await self._answer(entry, m.request_id, 200, {"doc": removed.path, "deleted": True, "revision": removed.revision})
