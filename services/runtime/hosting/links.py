"""The one place a session's parts reach parts built after them (session.py builds in dependency
order; these five cycles are what no order breaks): the Agent emits to the recorder, which records
through the turn order, which holds the Agent; the Agent's hooks (the model stream, the compactor,
the skill rules, the causal wait) call the run supervisor, the turn order, the pending queue and the
injections, which are built around the Agent. The root binds them once, after building them; a call
before that is a bug, and says so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from services.runtime.engine.types import AgentEvent
from shared.contracts.records.injection import InjectionKind
from shared.contracts.records.messages import AgentMessage, CustomMessage
from shared.contracts.streams.inbox import Injection


class _Injects(Protocol):
    def inject(self, kind: InjectionKind, messages: Sequence[AgentMessage]) -> object: ...


class _Turns(Protocol):
    def anchors(self) -> list[CustomMessage]: ...

    def restore_context(self) -> None: ...


class _Runs(Protocol):
    def model_opened(self) -> None: ...


class _Delivers(Protocol):
    async def deliver(self, m: Injection, entry_id: str | None) -> None: ...


class _Emits(Protocol):
    async def emit(self, event: AgentEvent) -> None: ...


class Unbound(RuntimeError):
    """A part was called before the root bound what it reaches (a construction-order bug)."""


class Links:
    def __init__(self) -> None:
        self._queue: _Injects | None = None
        self._turns: _Turns | None = None
        self._runs: _Runs | None = None
        self._injections: _Delivers | None = None
        self._recorder: _Emits | None = None

    def bind(self, *, queue: _Injects, turns: _Turns, runs: _Runs, injections: _Delivers, recorder: _Emits) -> None:
        if self._queue is not None:
            raise RuntimeError("the session's parts are bound once")
        self._queue, self._turns, self._runs = queue, turns, runs
        self._injections, self._recorder = injections, recorder

    @staticmethod
    def _need(part: Any, name: str) -> Any:
        if part is None:
            raise Unbound(f"{name} called before the session's parts were bound")
        return part

    # The Agent's own emit: engine events go to the recorder (recorder.py).
    async def emit(self, event: AgentEvent) -> None:
        recorder: _Emits = self._need(self._recorder, "emit")
        await recorder.emit(event)

    # The model stream's `opened`: a run's start is over (supervisor.py, turn_starts.py).
    def model_opened(self) -> None:
        runs: _Runs = self._need(self._runs, "model_opened")
        runs.model_opened()

    # The compactor's anchors and context reload (turn_order.py).
    def anchors(self) -> list[CustomMessage]:
        turns: _Turns = self._need(self._turns, "anchors")
        return turns.anchors()

    def restore_context(self) -> None:
        turns: _Turns = self._need(self._turns, "restore_context")
        turns.restore_context()

    # The skill rules' guidance, delivered where delivery_rules.py `decide` says (pending_queue.py `inject`).
    def inject(self, kind: InjectionKind, messages: Sequence[AgentMessage]) -> None:
        queue: _Injects = self._need(self._queue, "inject")
        queue.inject(kind, messages)

    # The causal wait's delivery of a timed-out wait's markers (causal.py).
    async def deliver(self, m: Injection, entry_id: str | None) -> None:
        injections: _Delivers = self._need(self._injections, "deliver")
        await injections.deliver(m, entry_id)
