"""The run supervisor in process (fake outbox and lease, a real Agent on scripted model steps):
typed outcomes, the running status around a run, what a run leaves to run, recovery."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from services.runtime.live.lease import LeaseLost
from services.runtime.live.pending import TurnInput
from services.runtime.runs.supervisor import RunSupervisor, interrupted
from services.runtime.runs.turn_starts import StartGate
from services.runtime.turns.pending_queue import source_key
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import AssistantMessage, UserMessage
from shared.contracts.streams.inbox import Injection, UserPrompt
from tests.unit.runtime_fakes import Host, answer, run_supervisor


class Pong:
    def __init__(self) -> None:
        self.pings = 0

    async def ping(self) -> bool:
        self.pings += 1
        return True


class AfterRun:
    def __init__(self) -> None:
        self.calls = 0

    async def after_run(self) -> None:
        self.calls += 1


def supervisor(host: Host) -> tuple[RunSupervisor, AfterRun, Pong]:
    after, pong = AfterRun(), Pong()
    return run_supervisor(host, pong, after), after, pong


def prompt_turn(host: Host, text: str, entry_id: str):
    return host.turns.build(TurnInput(prompt=UserPrompt(session_id="s1", message=text),
                                                       entry_id=entry_id))


async def test_a_run_reports_running_then_idle_and_compacts_between_runs(tmp_path: Path) -> None:
    host = Host(tmp_path)
    await host.transcript.ensure_header()
    sup, after, _ = supervisor(host)
    host.run.ended_at = -1.0
    assert await sup.run_once(prompt_turn(host, "hi", "1-0")) == "done"
    assert [d["running"] for d in host.outbox.events("status")] == [True, False]
    assert after.calls == 1 and host.run.ended_at >= 0.0  # the idle clock restarts at the run's end
    assert isinstance(host.agent.messages[-1], AssistantMessage)


async def test_a_lost_lease_stops_and_says_nothing(tmp_path: Path) -> None:
    async def lose() -> AssistantMessage:
        host.lease.lost = True
        raise LeaseLost("s1")

    host = Host(tmp_path, steps=[lose])
    await host.transcript.ensure_header()
    sup, after, _ = supervisor(host)
    assert await sup.run_once(prompt_turn(host, "hi", "1-0")) == "stop"
    assert [d["running"] for d in host.outbox.events("status")] == [True]
    assert after.calls == 0


async def test_a_redis_failure_is_transient_and_recovery_reruns_the_unrecorded_prompt(tmp_path: Path) -> None:
    async def redis_down() -> AssistantMessage:
        raise RedisConnectionError("gone")

    host = Host(tmp_path, steps=[redis_down])
    await host.transcript.ensure_header()
    host.record = False  # the failure came before the user message was recorded
    sup, after, pong = supervisor(host)
    turn = prompt_turn(host, "hi", "1-0")
    assert await sup.run_once(turn) == "transient"
    assert after.calls == 0
    go_on, resumed = await sup.recover(turn)
    assert go_on and pong.pings == 1
    assert resumed is not None and resumed != "queued"
    assert [m.content for m in resumed.messages if isinstance(m, UserMessage)] == ["hi"]
    assert [p.entry_id for p in resumed.prompts] == ["1-0"]  # still to ack once recorded


async def test_start_run_steers_into_a_running_run_and_the_task_runs_what_is_left(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def slow() -> AssistantMessage:
        await gate.wait()
        return answer("first")

    host = Host(tmp_path, steps=[slow])
    await host.transcript.ensure_header()
    sup, after, _ = supervisor(host)
    sup.start_run(prompt_turn(host, "one", "1-0"))
    await asyncio.sleep(0.05)
    assert sup.state.running
    sup.start_run(prompt_turn(host, "two", "2-0"))  # arrives during the run: steered into it
    gate.set()
    assert sup.state.run_task is not None
    await asyncio.wait_for(sup.state.run_task, 5)
    users = [m.content for m in host.agent.messages if isinstance(m, UserMessage)]
    assert users == ["one", "two"] and not sup.state.running
    assert sup.left_to_run() is None


async def test_interrupted_reads_the_transcript_end(tmp_path: Path) -> None:
    host = Host(tmp_path)
    await host.transcript.ensure_header()
    assert not interrupted(host.transcript)
    await host.transcript.append_message(UserMessage(content="x"))
    assert interrupted(host.transcript)
    await host.transcript.append_message(answer())
    assert not interrupted(host.transcript)


@pytest.mark.timeout(10)
async def test_a_closed_session_has_nothing_left_to_run(tmp_path: Path) -> None:
    host = Host(tmp_path)
    sup, _, _ = supervisor(host)
    host.agent.steer(UserMessage(content="queued"))
    assert sup.left_to_run() == "queued"
    host.life.drop()
    assert sup.left_to_run() is None
    go_on, _ = await sup.recover(None)
    assert not go_on


async def test_a_broken_run_gives_back_the_injections_it_took(tmp_path: Path) -> None:
    """A run that fails (not on Redis) after taking an injection: it goes back to the next turn, so a
    redelivery of its unacked entry does not merge into a record no queue holds (a stuck entry)."""
    async def broken() -> AssistantMessage:
        raise RuntimeError("a bug")

    host = Host(tmp_path, steps=[broken])
    await host.transcript.ensure_header()
    host.record = False
    sup, _, _ = supervisor(host)
    host.queue.route_update(Injection(
        session_id="s1", injection=RuntimeInjection(kind="workspace_update", content="note changed"),
        source="system", source_id="n-1"), "2-0")
    turn = prompt_turn(host, "hi", "1-0")
    assert ("system", "n-1") in [source_key(m) for m in turn.messages]
    assert await sup.run_once(turn) == "done"
    assert ("system", "n-1") in [source_key(m) for m in host.queue.next_turn]


async def test_a_run_starts_through_the_gate_and_gives_its_slot_back_when_its_model_request_opens(
        tmp_path: Path) -> None:
    opened = asyncio.Event()
    answered = asyncio.Event()

    async def model() -> AssistantMessage:
        sup.model_opened()  # what OpenAIStream's `opened` does once the response's headers are in
        opened.set()
        await answered.wait()
        return answer()

    host = Host(tmp_path, steps=[model])
    await host.transcript.ensure_header()
    sup, _, _ = supervisor(host)
    sup.starts = gate = StartGate(1, 60.0)
    other = await gate.enter()  # another session's turn, in its start
    run = asyncio.ensure_future(sup.run_once(prompt_turn(host, "hi", "1-0")))
    await asyncio.sleep(0.01)
    assert gate.waiting == 1 and not opened.is_set()  # nothing of the turn ran: it waits its turn
    other.release()
    await opened.wait()
    assert gate.active == 0  # the model request is open: the slot is free while the reply streams
    answered.set()
    assert await run == "done"
    assert gate.active == 0


async def test_a_run_that_ends_before_its_model_request_gives_its_slot_back(tmp_path: Path) -> None:
    async def broken() -> AssistantMessage:
        raise RuntimeError("a bug before the request")

    host = Host(tmp_path, steps=[broken])
    await host.transcript.ensure_header()
    sup, _, _ = supervisor(host)
    sup.starts = gate = StartGate(1, 60.0)
    assert await sup.run_once(prompt_turn(host, "hi", "1-0")) == "done"
    assert gate.active == 0


async def test_an_abort_ends_a_runs_wait_for_the_gate(tmp_path: Path) -> None:
    host = Host(tmp_path)
    await host.transcript.ensure_header()
    sup, _, _ = supervisor(host)
    sup.starts = gate = StartGate(1, 60.0)
    other = await gate.enter()
    run = asyncio.ensure_future(sup.run_once(prompt_turn(host, "hi", "1-0")))
    await asyncio.sleep(0.01)
    host.run.aborting = "user"  # what RunAborter.abort holds (RunSupervisor.held_back), then the signal
    host.agent.abort()
    assert await asyncio.wait_for(run, 5) == "done"
    assert gate.waiting == 0 and gate.active == 1
    assert not any(e.type == "agent_start" for e in host.events)  # the run never started
    other.release()
    assert gate.active == 0
