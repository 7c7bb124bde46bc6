"""The inbox dispatcher's collaborators as it sees them (dispatcher.py): narrow ports, each a handful
of members, so the dispatcher never holds a whole session part (docs/architecture.md)."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from services.runtime.live.pending import PendingTurn
from shared.contracts.events import EventType
from shared.contracts.inbox import Abort, UserPrompt
from shared.streams.inbox import InboxEntry


class PromptHook(Protocol):
    """Prompt-time context (services/runtime/turns/knowledge.py): read first, then applied to the turn."""
    async def fetch(self) -> Any: ...

    def apply(self, turn: PendingTurn, prompt: str, fetched: Any) -> None: ...


class Answers(Protocol):
    """The session's outbox as the dispatcher uses it (events.py): an error event, a client's reply."""

    async def event(self, type: EventType, data: dict[str, Any] | None = None) -> str | None: ...

    async def reply(self, request_id: str, status: int, body: dict[str, Any]) -> None: ...


class Held(Protocol):
    """The session's lease (lease.py): a lost one ends the retries."""

    @property
    def lost(self) -> bool: ...


class Runs(Protocol):
    def start_run(self, turn: PendingTurn | None) -> None: ...


class Aborts(Protocol):
    """POST /abort, on_busy=interrupt, expected_run_id (abort.py)."""

    async def abort(self, reason: Literal["user", "interrupt"]) -> object: ...

    async def on_abort(self, entry: InboxEntry, m: Abort) -> None: ...

    async def refuse_stale(self, entry: InboxEntry, m: UserPrompt) -> bool: ...

    async def accepted(self, m: UserPrompt) -> None: ...


class OpenCalls(Protocol):
    """Connector calls a dead holder sent, unanswered at the wake (connectors.py)."""

    @property
    def pending(self) -> frozenset[str]: ...
