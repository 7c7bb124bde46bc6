"""Forwarded live writes (docs/integration.md "Forwarded live writes"): UiUpdate, FileWrite,
DocumentEdit. Each is applied under the lease, made durable, answered on the reply key, then acked."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from shared import keys, workspace_fs
from shared.blobs import read_blob
from shared.contracts.documents import Deck, StoredDeck, merge_cards
from shared.contracts.events import UiUpdateData
from shared.contracts.inbox import DocumentEdit, FileWrite, UiUpdate
from shared.disk import (
    DiskError,
    atomic_write_json,
    check_size,
    read_json,
    split_workspace_path,
)
from shared.inbox import InboxEntry
from shared.uirules import UiRefused, validate_snapshot

from .forms import deliver_answered_form

if TYPE_CHECKING:
    from .session import Session


class WriteHandlers:
    def __init__(self, session: Session) -> None:
        self.s = session

    async def publish_ui(self, update: bytes) -> None:
        """Only the change goes out (issue 23: a full snapshot per event cost 1.48 MB of Redis each)."""
        if update:
            data = UiUpdateData(update=base64.b64encode(update).decode())
            await self.s.outbox.event("ui_update", data.model_dump())

    async def _answer(self, entry: InboxEntry, request_id: str, status: int, body: dict[str, Any]) -> None:
        # The effect is durable already: ack first, so whoever reads the reply sees a clean inbox.
        await self.s.ack(entry.entry_id)
        await self.s.outbox.reply(request_id, status, body)

    async def ui_update(self, entry: InboxEntry, m: UiUpdate) -> None:
        """Merge the client's Yjs update. When it changes nothing but carries a snapshot (a client that
        speaks snapshots only), the snapshot is applied instead. Both go through the rule the proxy
        applies while dormant (shared.uirules): a refused change changes nothing (400/413/422)."""
        try:
            snapshot = None if m.snapshot is None else validate_snapshot(m.snapshot, self.s.ui_limits)
            raw = base64.b64decode(m.update, validate=True)
            update = await self.s.ui.apply_update(raw)
            if not update and snapshot is not None:
                update = await self.s.ui.apply_snapshot(snapshot)
        except binascii.Error as exc:
            await self._answer(entry, m.request_id, 400, {"error": f"invalid Yjs update: {exc}"})
            return
        except UiRefused as exc:
            await self._answer(entry, m.request_id, exc.status, {"error": exc.message})
            return
        if update:
            await self.s.persist_ui()
        await self.publish_ui(update)
        await self._answer(entry, m.request_id, 200, {"snapshot": self.s.ui.snapshot(),
                                                      "update": self.s.ui.full_update_b64()})
        if self.s.barrier_passed:
            await deliver_answered_form(self.s)

    async def file_write(self, entry: InboxEntry, m: FileWrite) -> None:
        try:
            split_workspace_path(m.path, for_write=True)  # a name that can never be written: before any I/O
            data = await asyncio.to_thread(read_blob, self.s.deps.settings.data_dir, self.s.sid, m.blob, m.sha256)
            if data is not None:
                check_size(data, self.s.max_file_bytes)
        except DiskError as exc:
            await self._answer(entry, m.request_id, exc.status, {"error": str(exc)})
            return
        if data is None:  # the proxy removed it when it stopped waiting: nobody wants this write now
            await self._answer(entry, m.request_id, 410, {"error": "the written content is gone: the request "
                                                                  "was given up (timed out) before it was applied"})
            return
        await self.s.guard()
        try:
            # Beneath the workspace (no link out of it), atomic, within the session's quota.
            rel = workspace_fs.write_bytes(self.s.paths.workspace, m.path, data, quota=self.s.workspace_quota)
        except DiskError as exc:  # a directory in the way, a file as a parent, over quota: refused at once
            await self._answer(entry, m.request_id, exc.status, {"error": str(exc)})
            return
        if rel not in self.s.viewable_files:
            self.s.viewable_files = sorted({*self.s.viewable_files, rel})
        revision = await self._next_revision("file:" + rel)
        await self._answer(entry, m.request_id, 200, {"path": rel, "size": len(data), "revision": revision})

    async def _next_revision(self, ref: str) -> int:
        """The digest owns revisions; the reply reports the one this write will get (current + 1)."""
        raw = await self.s.deps.client.hget(keys.revisions(self.s.sid), ref)
        try:
            current = int(json.loads(raw).get("current", 0)) if raw else 0
        except (ValueError, AttributeError):
            current = 0
        return current + 1

    async def document_edit(self, entry: InboxEntry, m: DocumentEdit) -> None:
        try:
            path = self.s.paths.document(m.doc)
        except DiskError as exc:
            await self._answer(entry, m.request_id, exc.status, {"error": str(exc)})
            return
        raw = read_json(path)
        current = StoredDeck.model_validate(raw) if isinstance(raw, dict) else None
        revision = current.revision if current else 0
        if m.if_match is not None and m.if_match != revision:
            await self._answer(entry, m.request_id, 409, {"error": f"revision is {revision}, not {m.if_match}",
                                                          "revision": revision})
            return
        try:
            if m.op == "put":
                deck = Deck.model_validate(m.document)
            else:
                if current is None:
                    await self._answer(entry, m.request_id, 404, {"error": f"document {m.doc!r} not found"})
                    return
                deck = merge_cards(Deck.model_validate(current.model_dump(exclude={"revision"})), m.document)
        except (ValidationError, ValueError) as exc:
            await self._answer(entry, m.request_id, 400, {"error": f"invalid document: {exc}"})
            return
        stored = StoredDeck(**deck.model_dump(), revision=revision + 1)
        await self.s.guard()
        atomic_write_json(path, stored)
        await self._answer(entry, m.request_id, 200, stored.model_dump())
