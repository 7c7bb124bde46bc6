"""A yield holds (docs/architecture.md "Delivery, yield and the idle rules"), in process: the real Agent,
protocol and run supervisor on scripted model steps. A steer and a follow-up queued while the run's
terminating batch runs get no model call in that run; then the idle rules decide, with and without an
active task; a prompt steered into the run starts a new user turn. tests/integration/test_yield_holds.py
runs the same through the real runtime process and Redis."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.live.pending import TurnInput
from services.runtime.turns.delivery_rules import Action
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import (
    AgentMessage,
    AssistantMessage,
    CustomMessage,
    ToolCall,
    UserMessage,
)
from shared.contracts.streams.inbox import Injection, UserPrompt
from tests.unit.runtime_fakes import Host, answer, run_supervisor

pytestmark = pytest.mark.timeout(20)


class Pong:
    async def ping(self) -> bool:
        return True


class NoCompaction:
    async def after_run(self) -> None:
        return None


def injection(kind: str, source_id: str) -> Injection:
    return Injection(session_id="s1", injection=RuntimeInjection(kind=kind, content=f"<{kind}>{source_id}</{kind}>"),
                     source="notification", source_id=source_id)


class Scenario:
    """A host whose model answers the prompt with one blocking message_user; the tool queues `during`
    (injections routed by the protocol, prompts steered as the dispatcher steers them) while it runs."""

    def __init__(self, tmp_path: Path, during: list[Injection | UserPrompt], *, active_task: bool) -> None:
        self.host = Host(tmp_path, steps=[self.yield_call])
        self.during = during
        self.active_task = active_task
        self.calls: list[tuple[str | None, list[AgentMessage]]] = []  # (run id, context) per model call
        self.host.agent.context.tools.append(Tool(
            name="message_user", description="yield", parameters={"type": "object", "properties": {}},
            execute=self.message_user))
        self.sup = run_supervisor(self.host, Pong(), NoCompaction())

    async def yield_call(self) -> AssistantMessage:
        return AssistantMessage(content=[ToolCall(id="c1", name="message_user",
                                                  arguments={"message": "done", "blockOnUser": True})],
                                stop_reason="toolUse")

    async def message_user(self, _: dict[str, Any], __: ToolContext) -> ToolOutcome:
        for i, item in enumerate(self.during):
            if isinstance(item, Injection):
                assert self.host.queue.route_update(item, f"9-{i}") in (Action.STEER, Action.FOLLOW_UP, Action.NEXT_TURN)
            else:
                for m in self.host.turns.build(TurnInput(item, f"9-{i}", busy=True)).messages:
                    self.host.agent.steer(m)
        return ToolOutcome(content="Waiting for the user.", details={"blockOnUser": True}, terminate=True)

    async def run(self) -> None:
        h = self.host
        await h.transcript.ensure_header()
        if self.active_task:
            await h.todo.update([{"id": "t1", "content": "Build the deck", "status": "in_progress"}])
        stream = h.agent.hooks.stream

        async def counted(context: Any, emit: Any, signal: asyncio.Event) -> AssistantMessage:
            self.calls.append((getattr(h.outbox, "run_id", None), list(context.messages)))
            return await stream(context, emit, signal)

        h.agent.hooks = replace(h.agent.hooks, stream=counted)
        self.sup.start_run(h.turns.build(TurnInput(prompt=UserPrompt(session_id="s1", message="go"),
                                                                    entry_id="1-0")))
        assert self.sup.state.run_task is not None
        await asyncio.wait_for(self.sup.state.run_task, 10)

    def runs(self) -> list[str | None]:
        return list(dict.fromkeys(run for run, _ in self.calls))


def tags(messages: list[AgentMessage]) -> list[str]:
    return [m.custom_type if isinstance(m, CustomMessage) else m.role for m in messages]


async def test_without_an_active_task_what_was_queued_waits_for_the_next_prompt(tmp_path: Path) -> None:
    s = Scenario(tmp_path, [injection("system_update", "u1"), injection("background_result", "b1"),
                            injection("system_note", "n1")], active_task=False)
    await s.run()
    assert len(s.calls) == 1  # the yield's own call only: no further model call, no new run
    assert s.host.agent.queued() == []
    assert tags(s.host.queue.next_turn) == ["gamma.system_note", "gamma.system_update", "gamma.background_result"]
    turn = s.host.turns.build(TurnInput(prompt=UserPrompt(session_id="s1", message="next")))
    assert tags(turn.messages) == ["gamma.system_note", "gamma.system_update", "gamma.background_result", "user"]


async def test_with_an_active_task_a_steer_and_a_follow_up_start_a_new_turn(tmp_path: Path) -> None:
    s = Scenario(tmp_path, [injection("system_update", "u1"), injection("background_result", "b1"),
                            injection("system_note", "n1")], active_task=True)
    await s.run()
    first, second = s.runs()
    assert first != second and [run for run, _ in s.calls] == [first, second]  # one call each
    seen = s.calls[1][1]
    at = max(i for i, m in enumerate(seen) if m.role == "toolResult")
    assert tags(seen[at + 1:]) == ["gamma.system_update", "gamma.background_result"]  # the note waits
    assert tags(s.host.queue.next_turn) == ["gamma.system_note"]


async def test_a_prompt_steered_into_the_yielding_run_starts_a_new_user_turn(tmp_path: Path) -> None:
    from shared.contracts.records.client import PromptClientContext

    steered = UserPrompt(session_id="s1", message="and one more thing", client_context=PromptClientContext(locale="de-DE"))
    s = Scenario(tmp_path, [injection("system_update", "u1"), steered, injection("system_note", "n1")],
                 active_task=False)
    await s.run()
    first, second = s.runs()
    assert first != second
    seen = s.calls[1][1]
    at = max(i for i, m in enumerate(seen) if m.role == "toolResult")
    # The held injections first (the next-turn list, then what the queues held), then the prompt with
    # its view, as a prompt's own turn is built.
    assert tags(seen[at + 1:]) == ["gamma.system_note", "gamma.system_update", "gamma.client_view", "user"]
    assert isinstance(seen[-1], UserMessage) and seen[-1].content == "and one more thing"
    assert s.host.queue.next_turn == [] and s.host.agent.queued() == []


async def test_a_run_that_ends_without_a_yield_still_takes_its_follow_ups(tmp_path: Path) -> None:
    """Pi's rule stands for a run that stops on its own (plain text): follow-ups continue it."""
    host = Host(tmp_path, steps=[])
    await host.transcript.ensure_header()

    async def reply() -> AssistantMessage:
        host.queue.route_update(injection("background_result", "b1"), "2-0")
        return answer("first stop")

    host.steps.append(reply)
    sup = run_supervisor(host, Pong(), NoCompaction())
    sup.start_run(host.turns.build(TurnInput(prompt=UserPrompt(session_id="s1", message="go"))))
    assert sup.state.run_task is not None
    await asyncio.wait_for(sup.state.run_task, 10)
    assert tags(host.agent.messages) == ["user", "assistant", "gamma.background_result", "assistant"]
