"""PATCH /sessions/{id} on a live session (docs/models.md "Sessions"): the proxy has already written the
row (a later wake reads the new model there); the lease holder records the change in the transcript
and switches the settings its next model call is built from. A model call in flight finishes on the
model it started with."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from services.runtime.store.transcript import Transcript, now_iso
from shared.contracts.http import ModelConfig
from shared.contracts.records.transcript import ModelChangeEntry
from shared.contracts.streams.inbox import ModelChange
from shared.streams.inbox import InboxEntry


class Replies(Protocol):
    async def reply(self, request_id: str, status: int, body: dict[str, Any]) -> None: ...


class ModelSwitch:
    def __init__(self, transcript: Transcript, apply: Callable[[ModelConfig], None], outbox: Replies,
                 ack: Callable[[str | None], Awaitable[None]]) -> None:
        self.transcript = transcript
        self.apply = apply  # the session's parts that read the model switch to it (session.py `switch_model`)
        self.outbox = outbox
        self.ack = ack

    async def on_change(self, entry: InboxEntry, m: ModelChange) -> None:
        config = ModelConfig(name=m.name, reasoning_effort=m.reasoning_effort, api=m.api,
                             context_window=m.context_window)
        record = ModelChangeEntry(id=self.transcript.new_id(), timestamp=now_iso(), model_id=m.name,
                                  reasoning_effort=m.reasoning_effort, api=m.api)
        await self.transcript.append_entry(record)
        self.apply(config)
        await self.outbox.reply(m.request_id, 200, {"entry_id": record.id})
        await self.ack(entry.entry_id)
