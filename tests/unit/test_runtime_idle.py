"""Idle recording in process (services/runtime/idle.py): the real protocol, transcript and Recorder on a
temp dir; only the outbox is a fake (no Redis)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, AgentEvent, LoopConfig
from services.runtime.idle import IdleRecorder
from services.runtime.lease import LeaseLost
from services.runtime.protocol import SessionProtocolController
from services.runtime.recorder import Recorder
from services.runtime.todo import TodoController
from services.runtime.transcript import Transcript
from shared.contracts.inbox import Injection
from shared.contracts.injection import RuntimeInjection
from shared.contracts.messages import AssistantMessage, CustomMessage, TextContent, UserMessage
from tests.unit.runtime_fakes import FakeOutbox


async def never(*_: object) -> AssistantMessage:
    raise AssertionError("no model call expected")


async def sink(_: AgentEvent) -> None:
    return None


@dataclass
class IdleSession:
    path: Path
    lost: bool = False
    barrier_passed: bool = True
    running: bool = False
    acked: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.agent = Agent(AgentContext("sys", [], []), LoopConfig(stream=never), sink)
        self.transcript = Transcript.load(self.path / "t.jsonl", self.guard)
        self.todo = TodoController.load(self.path / "todo.json", self.guard)
        self.protocol = SessionProtocolController(self.agent, self.transcript, self.todo, {}, lambda: False)
        self.outbox = FakeOutbox()
        recorder = Recorder("s1", self.transcript, self.protocol, self.outbox, self.ack, {}, None,  # type: ignore[arg-type]
                            None, lambda: "m", lambda: self.agent.messages)
        self.idle = IdleRecorder(self, recorder.record)

    async def guard(self) -> None:
        if self.lost:
            raise LeaseLost("s1")

    async def ack(self, entry_id: str | None) -> None:
        self.acked.append(entry_id)


def inj(kind: str, source_id: str, **kw: object) -> Injection:
    return Injection(session_id="s1", injection=RuntimeInjection(kind=kind, content=f"<{kind}>{source_id}</{kind}>"),  # type: ignore[arg-type]
                     source=kw.pop("source", "notification"), source_id=source_id, **kw)  # type: ignore[arg-type]


def types(messages: list[object]) -> list[str]:
    return [m.custom_type if isinstance(m, CustomMessage) else type(m).__name__ for m in messages]


async def test_held_updates_are_recorded_then_in_context_then_acked_and_next_turn_kinds_wait(tmp_path: Path) -> None:
    s = IdleSession(tmp_path)
    await s.todo.update([{"id": "t1", "content": "plan", "status": "pending"}])  # changed outside the context: anchor due
    s.agent.replace_messages([AssistantMessage(content=[TextContent(text="done")])])
    assert s.protocol.route_update(inj("system_note", "n1", source="system"), "e0") == "next_turn"
    assert s.protocol.route_update(inj("system_update", "u1"), "e1") == "next_turn"
    assert await s.idle.flush() == 2
    # The anchor first, as the next turn would have put it; the note still waits for a prompt.
    assert types(s.agent.messages) == ["AssistantMessage", "gamma.todo_anchor", "gamma.system_update"]
    assert [e.custom_type for e in s.transcript.entries] == ["gamma.todo_anchor", "gamma.system_update"]  # type: ignore[union-attr]
    assert s.acked == ["e1"] and ("notification", "u1") in s.transcript.sources
    assert types(s.protocol.next_turn) == ["gamma.system_note"]
    assert s.protocol.route_update(inj("system_update", "u1"), "e1b") == "recorded"  # a redelivery


async def test_nothing_is_recorded_during_a_run_before_the_barrier_or_from_behind_a_kept_prompt(tmp_path: Path) -> None:
    s = IdleSession(tmp_path, barrier_passed=False)
    s.protocol.route_update(inj("system_update", "u1"), "e1")
    assert await s.idle.flush() == 0
    s.barrier_passed, s.running = True, True
    assert await s.idle.flush() == 0  # the run task takes it itself (or records it as it ends)
    assert await s.idle.flush(in_run_task=True) == 1
    kept = UserMessage(content="kept by an abort")
    s.protocol.next_turn = [kept]
    s.running = False
    s.protocol.route_update(inj("system_update", "u2"), "e2")
    assert await s.idle.flush() == 0  # an update never overtakes a prompt that came before it
    assert s.protocol.next_turn[0] is kept and len(s.protocol.next_turn) == 2


async def test_a_failed_record_puts_the_update_back_for_the_next_turn(tmp_path: Path) -> None:
    s = IdleSession(tmp_path, lost=True)
    s.protocol.route_update(inj("system_update", "u1"), "e1")
    with pytest.raises(LeaseLost):
        await s.idle.flush()
    assert s.agent.messages == [] and s.acked == [] and types(s.protocol.next_turn) == ["gamma.system_update"]
    s.lost = False
    assert await s.idle.flush() == 1
    assert types(s.agent.messages) == ["gamma.system_update"] and s.acked == ["e1"] and not s.protocol.next_turn
