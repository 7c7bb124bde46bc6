"""What the session protocol hands around: a pending injection or prompt (with the inbox entries to
ack once its transcript entry is durable; pending_queue.py holds them), a turn's messages, and a
prompt's turn input (turn_order.py puts it in order)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.contracts.records.injection import InjectionKind
from shared.contracts.records.messages import AgentMessage, CustomMessage, UserMessage
from shared.contracts.streams.inbox import OnBusy, UserPrompt


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
    on_busy: OnBusy = "steer"  # its kind for delivery_rules.py `decide` when it meets a run after being taken in


@dataclass
class PendingTurn:
    """What a run is given: the messages, and for the recorder the prompts and injections among them."""
    messages: list[AgentMessage]
    prompts: list[PendingPrompt] = field(default_factory=list)
    injections: list[PendingInjection] = field(default_factory=list)


@dataclass(frozen=True)
class Taken:
    """What a prompt takes from the pending queue for its turn (pending_queue.py `take_for_prompt`): the
    messages queued before it, its hints not queued already, and for the recorder the prompts (kept
    ones first, then its own) and the injections among them."""
    queued: list[AgentMessage]
    hints: list[AgentMessage]
    prompts: list[PendingPrompt]
    injections: list[PendingInjection]


@dataclass(frozen=True)
class TurnInput:
    """A prompt's turn, as the turn builder is given it (turn_order.py `build`): the prompt, its inbox
    entry, the prompt-time hints read for it (knowledge.py, connector_catalog.py: they go before the
    user message), and whether a run is on (the turn is then steered or followed up into it)."""
    prompt: UserPrompt
    entry_id: str | None = None
    hints: tuple[AgentMessage, ...] = ()
    busy: bool = False
