"""The live UI document of a session (uistate.UiDoc) with its disk file and its event: rebuilt from
state.json when first needed (a UI sync, a tool, the barrier's form check), not on the wake path.
Safe to read late: once the lease is held and the proxy's dormant-write lock is gone, only this
holder writes state.json."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, Protocol

import structlog

from services.runtime.store.write_guard import Guard
from services.runtime.ui.uistate import UiDoc
from shared.contracts.streams.events import EventType, UiUpdateData
from shared.storage.disk import SessionPaths, atomic_write_json, read_json, storage_fault
from shared.ui.uirules import UiLimits, repair_snapshot

log = structlog.get_logger()


class EventOutbox(Protocol):
    async def event(self, type: EventType, data: dict[str, Any] | None = None) -> str | None: ...


class UiHost(Protocol):
    """The UI document as its users (tools, forms, cost records, the recorder) see it: a `LiveUi`."""

    async def document(self) -> UiDoc: ...

    async def persist_ui(self) -> None: ...

    async def publish_ui(self, update: bytes) -> None: ...


class LiveUi:
    def __init__(self, paths: SessionPaths, limits: UiLimits, guard: Guard,
                 outbox: EventOutbox) -> None:
        self.paths = paths
        self.limits = limits
        self.guard = guard
        self.outbox = outbox
        self._doc: UiDoc | None = None
        self._read: list[Any] = []  # state.json as the wake read it (`preload`), until the first use

    def preload(self, raw: Any) -> None:
        """state.json as the wake's read found it (session_files.py): the first use builds from it
        instead of reading again. Only this holder writes the file from then on (see above)."""
        self._read = [raw]

    async def document(self) -> UiDoc:
        """The document, built at its first use from state.json, read in the I/O pool (or with the
        wake's files): on a slow disk a read on the event loop would hold every other session (README
        "Reliability")."""
        if self._doc is None:
            raw = self._read.pop() if self._read else await asyncio.get_running_loop().run_in_executor(
                None, read_json, self.paths.state)
            if self._doc is None:  # another first use loaded it meanwhile: that one may have changed since
                self._doc = UiDoc.from_snapshot(repair_snapshot(raw), self.limits)
        return self._doc

    async def persist_ui(self) -> None:
        if self._doc is None:
            return  # never loaded, so never changed: state.json is already what it should be
        # Taken now: writes take turns in call order (write_guard.py), so a later state is written later.
        snapshot = self._doc.snapshot()
        await self.guard.write(lambda: atomic_write_json(self.paths.state, snapshot))

    async def persist_at_close(self, sid: str) -> None:
        """A bad disk does not keep the session live (session.py `close`): state.json keeps every change
        a client was told succeeded."""
        try:
            await self.persist_ui()
        except OSError as exc:
            fault = storage_fault(exc)
            if fault is None:
                raise
            log.warning("ui_state_not_persisted_at_close", session_id=sid, error=str(fault))

    async def publish_ui(self, update: bytes) -> None:
        """Only the change goes out (docs/architecture.md "Limits on hostile input": a full snapshot per event cost 1.48 MB of Redis each)."""
        if update:
            data = UiUpdateData(update=base64.b64encode(update).decode())
            await self.outbox.event("ui_update", data.model_dump())
