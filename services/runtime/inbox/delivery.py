"""One injection delivered (docs/architecture.md "Delivery, yield and the idle rules"): from the
inbox, from the causal gate's markers, from a form answered while dormant. The protocol routes it
where delivery_rules.py `decide` says; a redelivered one is answered for again; one decided
START_TURN starts a run on the idle session; one left held arms idle recording."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from services.runtime.live.pending import PendingTurn
from services.runtime.live.state import SessionState
from services.runtime.store.transcript import Transcript
from services.runtime.turns.delivery_rules import Action, Found
from services.runtime.turns.pending_queue import PendingQueue
from shared.contracts.streams.inbox import Injection

# Left in the next-turn list: idle recording's windows open for what it records (idle.py `arm`).
HELD = frozenset({Found.MERGED, Action.NEXT_TURN, Action.RECORD_IDLE, Action.HOLD})


class Recorded(Protocol):
    async def __call__(self, source: str, source_id: str, entry_id: str, ref: str | None,
                       to_revision: int | None) -> None: ...


class RunStarter(Protocol):
    def start_run(self, turn: PendingTurn | None) -> None: ...


class InjectionDelivery:
    def __init__(self, state: SessionState, queue: PendingQueue, transcript: Transcript,
                 runs: RunStarter, recorded: Recorded, ack: Callable[[str | None], Awaitable[None]],
                 held: Callable[[], None] = lambda: None) -> None:
        self.state = state
        self.queue = queue
        self.transcript = transcript
        self.runs = runs
        self.recorded = recorded  # InjectionRecorded, published again for a redelivery (recorder.py)
        self.ack = ack
        self.held = held  # an update left held for an idle agent is recorded after its merge window (idle.py)

    async def deliver(self, m: Injection, entry_id: str | None) -> None:
        """An injection from the inbox, or (entry_id None) one restored at wake (an answered form)."""
        result = self.queue.route_update(m, entry_id, hold=not self.state.barrier_passed)
        if result is Found.RECORDED:
            # Already consumed (a redelivery): tell the owner again, it may have missed it.
            recorded_as = self.transcript.sources[(m.source, m.source_id)]
            await self.recorded(m.source, m.source_id, recorded_as, m.ref, m.to_revision)
            await self.ack(entry_id)
        elif result is Found.COVERED and m.ref:
            # Everything it reports is in an artifact_update already recorded: that entry answers for it.
            await self.recorded(m.source, m.source_id, self.transcript.told[m.ref][1], m.ref, m.to_revision)
            await self.ack(entry_id)
        elif result is Action.START_TURN and not self.state.running:
            self.runs.start_run(self.queue.take_idle())
        elif result in HELD:
            self.held()
