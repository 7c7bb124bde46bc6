"""Fakes for the runtime session's parts in process: an outbox that records what it would send and
a lease that answers `check()` from a flag, plus a host holding real protocol state (transcript,
todo, Agent, SessionProtocolController on a temp dir) around them. No Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, AgentEvent, Emit, RunHooks
from services.runtime.lease import LeaseLost
from services.runtime.protocol import PendingTurn, SessionProtocolController
from services.runtime.todo import TodoController
from services.runtime.transcript import Transcript
from shared.contracts.messages import AssistantMessage, TextContent
from shared.inbox import InboxEntry

Step = Callable[[], Awaitable[AssistantMessage]]


class FakeOutbox:
    """Records (kind, ...) in send order; `fail` raises on the next sends (e.g. a RedisError)."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.fail: Exception | None = None

    async def event(self, type: str, data: dict[str, Any] | None = None, also: Any = None, *,
                    fenced: bool = True, wait: bool = True) -> None:
        if self.fail is not None:
            raise self.fail
        self.sent.append(("event", type, data, wait))

    async def reply(self, request_id: str, status: int, body: dict[str, Any], *, fenced: bool = True) -> None:
        self.sent.append(("reply", request_id, status, body))

    async def publish(self, stream: str, message: BaseModel) -> None:
        self.sent.append(("publish", stream, message))

    def events(self, type: str) -> list[dict[str, Any] | None]:
        return [s[2] for s in self.sent if s[0] == "event" and s[1] == type]


class FakeLease:
    def __init__(self, sid: str = "s1") -> None:
        self.sid = sid
        self.fence = 7
        self.lost = False

    async def check(self) -> None:
        if self.lost:
            raise LeaseLost(self.sid)


def answer(text: str = "ok") -> AssistantMessage:
    return AssistantMessage(content=[TextContent(text=text)])


class Host:
    """The session state the dispatcher and the supervisor act on, with a model of scripted steps."""

    def __init__(self, tmp_path: Path, steps: list[Step] | None = None, wake_id: str = "w1") -> None:
        self.sid = "s1"
        self.wake_id = wake_id
        self.closed = False
        self.lease = FakeLease(self.sid)
        self.outbox = FakeOutbox()
        self.steps = list(steps or [])
        self.events: list[AgentEvent] = []
        self.agent = Agent(AgentContext("sys", [], []), RunHooks(stream=self._stream), self._emit)
        self.transcript = Transcript.load(tmp_path / "t.jsonl", self.lease.check)
        self.todo = TodoController.load(tmp_path / "todo.json", self.lease.check)
        self.protocol = SessionProtocolController(self.agent, self.transcript, self.todo, {},
                                                  lambda: self.todo.has_active_task)
        self.queue: asyncio.Queue[InboxEntry] = asyncio.Queue()
        self.held: list[InboxEntry] = []
        self.barrier_passed = False
        self.stop_requested: str | None = None
        self.stop_replies: list[str] = []
        self.acked: list[str] = []
        self.started: list[PendingTurn | None] = []
        self.touched = 0
        self.is_running = False
        self.record = True  # message_end -> transcript (off: a run that fails before recording anything)

    async def _stream(self, context: AgentContext, emit: Emit, signal: asyncio.Event) -> AssistantMessage:
        return await self.steps.pop(0)() if self.steps else answer()

    async def _emit(self, event: AgentEvent) -> None:
        self.events.append(event)
        if self.record and event.type == "message_end" and event.message is not None:
            await self.transcript.append_message(event.message)  # type: ignore[arg-type]

    @property
    def running(self) -> bool:
        return self.is_running

    def touch(self) -> None:
        self.touched += 1

    @property
    def awaiting_connector(self) -> bool:
        return False  # no connector call outlives a wake here (tests/integration/test_connector_faults.py)

    async def await_connector_calls(self) -> None:
        return None

    def start_run(self, turn: PendingTurn | None) -> None:
        self.started.append(turn)

    async def ack(self, entry_id: str | None) -> None:
        if entry_id:
            self.acked.append(entry_id)
