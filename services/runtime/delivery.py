"""One injection delivered (docs/architecture.md "Delivery, yield and the idle rules"): from the
inbox, from the causal gate's markers, from a form answered while dormant. The protocol decides
where it goes; a redelivered one is answered for again; one that may start a run on an idle session
starts it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from shared.contracts.inbox import Injection

from .pending import PendingTurn
from .state import SessionState
from .transcript import Transcript
from .turn_order import TurnOrder


class Recorded(Protocol):
    async def __call__(self, source: str, source_id: str, entry_id: str, ref: str | None,
                       to_revision: int | None) -> None: ...


class RunStarter(Protocol):
    def start_run(self, turn: PendingTurn | None) -> None: ...


class InjectionDelivery:
    def __init__(self, state: SessionState, turns: TurnOrder, transcript: Transcript,
                 runs: RunStarter, recorded: Recorded, ack: Callable[[str | None], Awaitable[None]],
                 held: Callable[[], None] = lambda: None) -> None:
        self.state = state
        self.turns = turns
        self.transcript = transcript
        self.runs = runs
        self.recorded = recorded  # InjectionRecorded, published again for a redelivery (recorder.py)
        self.ack = ack
        self.held = held  # an update left held for an idle agent is recorded after its merge window (idle.py)

    async def deliver(self, m: Injection, entry_id: str | None) -> None:
        """An injection from the inbox, or (entry_id None) one restored at wake (an answered form)."""
        result = self.turns.route_update(m, entry_id, hold=not self.state.barrier_passed)
        if result == "recorded":
            # Already consumed (a redelivery): tell the owner again, it may have missed it.
            recorded_as = self.transcript.sources[(m.source, m.source_id)]
            await self.recorded(m.source, m.source_id, recorded_as, m.ref, m.to_revision)
            await self.ack(entry_id)
        elif result == "covered" and m.ref:
            # Everything it reports is in an artifact_update already recorded: that entry answers for it.
            await self.recorded(m.source, m.source_id, self.transcript.told[m.ref][1], m.ref, m.to_revision)
            await self.ack(entry_id)
        elif result == "start" and not self.state.running:
            self.runs.start_run(self.turns.take_idle())
        elif result in ("next_turn", "merged"):
            self.held()
