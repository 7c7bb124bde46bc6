"""The inbox dispatcher's collaborators as it sees them (dispatcher.py): narrow ports, each a handful
of members, so the dispatcher never holds a whole session part (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from services.runtime.live.pending import PendingPrompt, PendingTurn, TurnInput
from services.runtime.turns.delivery_rules import When
from shared.contracts.records.messages import AgentMessage
from shared.contracts.streams.events import EventType
from shared.contracts.streams.inbox import Abort, UserPrompt
from shared.streams.inbox import InboxEntry

if TYPE_CHECKING:
    from services.runtime.engine.agent import Agent
    from services.runtime.inbox.causal import CausalGate
    from services.runtime.inbox.delivery import InjectionDelivery
    from services.runtime.store.transcript import Transcript

Handler = Callable[[InboxEntry, Any], Awaitable[None]]  # a write or compaction entry's handler


class PromptHook(Protocol):
    """Prompt-time context (services/runtime/turns/knowledge.py, connector_catalog.py): read first, then
    the hints it gives for the prompt, an input of its turn (turn_order.py)."""
    async def fetch(self) -> Any: ...

    def hints(self, prompt: str, fetched: Any) -> list[AgentMessage]: ...


class Queued(Protocol):
    """The pending queue as the dispatcher asks it (pending_queue.py): the idle turns, and whether a
    prompt is on its way already (a read). A prompt's way into it is the turn builder's (`Builds`)."""

    def take_idle(self, when: When | None = None) -> PendingTurn | None: ...

    def pending_prompt(self, prompt_id: str) -> PendingPrompt | None: ...


class Builds(Protocol):
    """The turn builder (turn_order.py): a prompt's turn."""

    def build(self, turn: TurnInput) -> PendingTurn: ...


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


@dataclass(frozen=True)
class PromptRoutes:
    """Where a prompt, an injection or a barrier goes: the run, the turn order, the gates before them."""

    agent: Agent
    queue: Queued  # the pending queue (pending_queue.py): the idle turns
    turns: Builds  # the turn builder (turn_order.py)
    transcript: Transcript
    runs: Runs
    injections: InjectionDelivery
    causal: CausalGate | None = None  # holds prompts until the writes before them are in (causal.py)
    calls: OpenCalls | None = None
    prompt_hook: PromptHook | None = None
    aborts: Aborts | None = None  # POST /abort, on_busy=interrupt, expected_run_id (abort.py)


@dataclass(frozen=True)
class Replies:
    """How an entry is answered and settled: the client's reply, the ack, the dead-letter stream, a Stop."""

    outbox: Answers
    ack: Callable[[str | None], Awaitable[None]]
    client: Any  # Redis, for the dead-letter stream
    # (sid, reason) -> None: the session is closed now (worker.py); without it a Stop is answered at once.
    request_close: Callable[[str, str], None] | None = None


@dataclass(frozen=True)
class EntryHandlers:
    """The other entries' handlers (writes, compaction, connectors, rewinds, model changes) by type,
    and what the wake barrier does before the held prompts (the dormant manifest, a dormant form)."""

    handlers: dict[type, Handler]
    at_barrier: Callable[[], Awaitable[None]]
