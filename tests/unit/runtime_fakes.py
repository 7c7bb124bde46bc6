"""Fakes for the runtime session's parts in process: an outbox that records what it would send and
a lease that answers `check()` from a flag, plus a host holding real protocol state (transcript,
todo, Agent, pending queue and turn builder on a temp dir) around them. No Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel

from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, AgentEvent, Emit, RunHooks
from services.runtime.hosting.lifecycle import Lifecycle
from services.runtime.live.lease import LeaseLost
from services.runtime.live.pending import PendingTurn, TurnInput
from services.runtime.live.state import InboxState, RunState, SessionState
from services.runtime.runs.supervisor import AfterRun, RunSupervisor
from services.runtime.store.todo import TodoController
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from services.runtime.turns.pending_queue import PendingQueue
from services.runtime.turns.turn_order import TurnBuilder
from shared.contracts.records.messages import AgentMessage, AssistantMessage, TextContent
from shared.contracts.streams.inbox import UserPrompt

Step = Callable[[], Awaitable[AssistantMessage]]


class FakeOutbox:
    """Records (kind, ...) in send order; `fail` raises on the next sends (e.g. a RedisError)."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.fail: Exception | None = None
        self.run_id: str | None = None  # stamped by the supervisor while a run is active (events.py)
        self.traceparent: str | None = None

    def for_run(self, run_id: str | None, traceparent: str | None = None) -> None:
        self.run_id, self.traceparent = run_id, traceparent

    async def event(self, type: str, data: dict[str, Any] | None = None, also: Any = None, *,
                    fenced: bool = True, wait: bool = True) -> None:
        if self.fail is not None:
            raise self.fail
        self.sent.append(("event", type, data, wait))

    async def reply(self, request_id: str, status: int, body: dict[str, Any], *, fenced: bool = True) -> None:
        self.sent.append(("reply", request_id, status, body))

    async def publish(self, stream: str, message: BaseModel) -> None:
        self.sent.append(("publish", stream, message))

    bus = publish  # the service streams (gamma:lifecycle): events.py `Outbox.bus`

    def events(self, type: str) -> list[dict[str, Any]]:
        return [s[2] or {} for s in self.sent if s[0] == "event" and s[1] == type]


class FakeLease:
    def __init__(self, sid: str = "s1") -> None:
        self.sid = sid
        self.fence = 7
        self.lost = False
        self.released = False

    async def release(self) -> None:
        self.released = True

    async def check(self) -> None:
        if self.lost:
            raise LeaseLost(self.sid)


def answer(text: str = "ok") -> AssistantMessage:
    return AssistantMessage(content=[TextContent(text=text)])


class Host:
    """The parts the dispatcher and the supervisor act on (real protocol state: transcript, todo,
    Agent, pending queue and turn builder on a temp dir), with a model of scripted steps. As the
    dispatcher's `runs` it records the turns it is asked to start."""

    def __init__(self, tmp_path: Path, steps: list[Step] | None = None, wake_id: str = "w1") -> None:
        self.sid = "s1"
        # The parts' writers (the supervisor, the dispatcher, the session) and the view the others read.
        self.run, self.inbox, self.life = RunState(), InboxState(), Lifecycle()
        self.state = SessionState(self.sid, wake_id, self.run, self.inbox, self.life)
        self.lease = FakeLease(self.sid)
        self.outbox = FakeOutbox()
        self.steps = list(steps or [])
        self.events: list[AgentEvent] = []
        self.agent = Agent(AgentContext("sys", [], []), RunHooks(stream=self._stream), self._emit)
        self.transcript = Transcript.load(tmp_path / "t.jsonl", WriteGuard(self.lease.check))
        self.todo = TodoController.load(tmp_path / "todo.json", WriteGuard(self.lease.check))
        self.queue = PendingQueue(self.agent, self.transcript, lambda: self.todo.has_active_task)
        self.turns = TurnBuilder(self.queue, self.agent, self.transcript, self.todo, {})
        self.acked: list[str] = []
        self.started: list[PendingTurn | None] = []
        self.record = True  # message_end -> transcript (off: a run that fails before recording anything)
        self._idle = asyncio.Event()

    async def _stream(self, context: AgentContext, emit: Emit, signal: asyncio.Event) -> AssistantMessage:
        return await self.steps.pop(0)() if self.steps else answer()

    async def _emit(self, event: AgentEvent) -> None:
        self.events.append(event)
        if self.record and event.type == "message_end" and event.message is not None:
            await self.transcript.append_message(event.message)

    def busy(self) -> None:
        """A run task that never ends on its own: the session counts as running."""
        self.run.run_task = asyncio.ensure_future(self._never())

    async def _never(self) -> None:
        await self._idle.wait()

    def start_run(self, turn: PendingTurn | None) -> None:
        self.started.append(turn)

    async def ack(self, entry_id: str | None) -> None:
        if entry_id:
            self.acked.append(entry_id)


def run_supervisor(host: Host, client: Any, after_run: AfterRun) -> RunSupervisor:
    """The supervisor over the host's parts; `client` answers `ping` (Redis after a failed run)."""
    return RunSupervisor(host.state, host.run, host.lease, host.outbox, host.agent, host.queue, host.transcript,
                         reload=host.turns.restore_context, client=client, lease_ms=30_000, after_run=after_run)


def build(queue: PendingQueue, prompt: UserPrompt, entry_id: str | None = None, *, busy: bool = False,
          hints: tuple[AgentMessage, ...] = ()) -> PendingTurn:
    """A prompt's turn over `queue` (turn_order.py), with no todo anchor or skills."""
    todo = SimpleNamespace(current=SimpleNamespace(items=[], revision=0))
    builder = TurnBuilder(queue, queue.agent, queue.transcript, todo, {})  # type: ignore[arg-type]
    return builder.build(TurnInput(prompt, entry_id, hints, busy=busy))
