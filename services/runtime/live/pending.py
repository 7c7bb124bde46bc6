"""What the session protocol hands around: a pending injection or prompt (with the inbox entries to
ack once its transcript entry is durable), a turn's messages, and a run's input (services/runtime/
turn_order.py puts them in order)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.contracts.inbox import UserPrompt
from shared.contracts.injection import InjectionKind
from shared.contracts.messages import AgentMessage, CustomMessage, UserMessage


@dataclass
class PendingInjection:
    message: CustomMessage
    source: str
    source_id: str
    kind: InjectionKind  # its delivery is delivery_rules.py `decide` of this kind
    entry_ids: list[str] = field(default_factory=list)
    ref: str | None = None
    to_revision: int | None = None


@dataclass
class PendingPrompt:
    """A prompt's user message not yet recorded: its prompt id and the inbox entry to ack then."""
    prompt_id: str
    entry_id: str | None
    message: UserMessage
    # Other inbox entries carrying the same prompt id (an append retried, an entry claimed twice at a
    # wake): acked with this one once it is recorded, never recorded themselves.
    twins: list[str] = field(default_factory=list)


@dataclass
class PendingTurn:
    """What a run is given: the messages, and for the recorder the prompts and injections among them."""
    messages: list[AgentMessage]
    prompts: list[PendingPrompt] = field(default_factory=list)
    injections: list[PendingInjection] = field(default_factory=list)


@dataclass
class TurnInput:
    prompt: UserPrompt | None
    entry_id: str | None = None
