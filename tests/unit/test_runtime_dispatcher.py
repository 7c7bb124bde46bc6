"""The inbox dispatcher in process (fake outbox and lease, real protocol state): the wake barrier,
Stop, handlers retried in order on a transient failure, injections with and without an entry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from services.runtime.inbox.delivery import InjectionDelivery
from services.runtime.inbox.dispatcher import InboxDispatcher, RecentIds
from services.runtime.inbox.dispatcher_ports import EntryHandlers, PromptRoutes, Replies
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import UserMessage
from shared.contracts.streams.inbox import Abort, Barrier, Injection, Stop, UiUpdate, UserPrompt
from shared.streams.inbox import InboxEntry
from tests.unit.runtime_fakes import Host


class NoRuns:
    """The abort side: no run ids to check (tests/integration/test_abort.py covers them for real)."""

    async def abort(self, reason: str) -> None:
        return None

    async def on_abort(self, entry: InboxEntry, m: Abort) -> None:
        return None

    async def refuse_stale(self, entry: InboxEntry, m: UserPrompt) -> bool:
        return False

    async def accepted(self, m: UserPrompt) -> None:
        return None


def dispatcher(host: Host, handlers: dict[type, Any] | None = None, request_close: Any = None) -> InboxDispatcher:
    async def recorded(source: str, source_id: str, entry_id: str, ref: str | None, to_revision: int | None) -> None:
        return None

    async def at_barrier() -> None:  # no dormant manifest, no form answered while dormant
        return None

    injections = InjectionDelivery(host.state, host.queue, host.transcript, host, recorded, host.ack)
    routes = PromptRoutes(host.agent, host.queue, host.turns, host.transcript, host, injections, aborts=NoRuns())
    return InboxDispatcher(host.state, host.inbox, host.lease, routes, Replies(host.outbox, host.ack, None, request_close),
                           EntryHandlers(handlers or {}, at_barrier))


def entry(entry_id: str, message: Any) -> InboxEntry:
    return InboxEntry(session_id="s1", entry_id=entry_id, message=message)


async def test_prompts_wait_for_this_wakes_barrier(tmp_path: Path) -> None:
    host = Host(tmp_path, wake_id="w2")
    d = dispatcher(host)
    await host.transcript.ensure_header()
    await d.handle(entry("1-0", UserPrompt(session_id="s1", message="first")))
    await d.handle(entry("2-0", Barrier(session_id="s1", wake_id="w1")))  # an earlier wake's barrier
    assert host.started == [] and len(host.state.held) == 1 and host.acked == ["2-0"]
    await d.handle(entry("3-0", Barrier(session_id="s1", wake_id="w2")))
    assert host.state.barrier_passed and host.state.held == () and host.acked == ["2-0", "3-0"]
    [turn] = host.started
    assert turn is not None and [p.entry_id for p in turn.prompts] == ["1-0"]
    assert isinstance(last := turn.messages[-1], UserMessage) and last.content == "first"


async def test_a_busy_prompt_is_steered_and_a_rejecting_one_refused(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.inbox.barrier_passed = True
    host.busy()
    d = dispatcher(host)
    await host.transcript.ensure_header()
    await d.handle(entry("1-0", UserPrompt(session_id="s1", message="also", on_busy="steer")))
    assert [m.content if isinstance(m, UserMessage) else m for m in host.agent.queued()] == ["also"]
    assert host.acked == []  # acked once recorded
    refused = UserPrompt(session_id="s1", message="no", on_busy="reject")
    await d.handle(entry("2-0", refused))
    assert host.outbox.events("error") == [{"error": "busy", "promptId": refused.prompt_id}]
    assert host.acked == ["2-0"]


async def test_stop_is_answered_after_the_close_when_the_worker_closes(tmp_path: Path) -> None:
    closes: list[tuple[str, str]] = []
    host = Host(tmp_path)
    d = dispatcher(host, request_close=lambda sid, reason: closes.append((sid, reason)))
    await d.handle(entry("1-0", Stop(session_id="s1", reason="user", request_id="r1")))
    assert host.state.stop_requested == "user" and host.state.stop_replies == ("r1",) and closes == [("s1", "user")]
    assert host.acked == ["1-0"] and host.outbox.sent == []
    alone = Host(tmp_path / "b")
    await dispatcher(alone).handle(entry("1-0", Stop(session_id="s1", reason="user", request_id="r2")))
    assert alone.outbox.sent == [("reply", "r2", 200, {"status": "dormant"})]


@pytest.mark.timeout(10)
async def test_a_transient_failure_is_retried_in_place(tmp_path: Path) -> None:
    host = Host(tmp_path)
    calls: list[str] = []

    async def flaky(e: InboxEntry, _: UiUpdate) -> None:
        calls.append(e.entry_id)
        if len(calls) < 3:
            raise RedisConnectionError("redis restarting")
        await host.ack(e.entry_id)

    d = dispatcher(host, {UiUpdate: flaky})
    await d.handle_retrying(entry("1-0", UiUpdate(session_id="s1", update="", request_id="r1")))
    assert calls == ["1-0", "1-0", "1-0"] and host.acked == ["1-0"]


async def test_an_entry_handed_to_the_session_twice_is_handled_once(tmp_path: Path) -> None:
    """A write handled again after a later one would undo it: the session takes each entry id once."""
    host = Host(tmp_path)
    host.inbox.barrier_passed = True
    calls: list[str] = []

    async def write(e: InboxEntry, m: UiUpdate) -> None:
        calls.append(f"{e.entry_id}:{m.update}")
        if e.entry_id == "2-0":
            host.life.drop()  # the last entry: the loop ends after it

    d = dispatcher(host, {UiUpdate: write})
    for eid, update in (("1-0", "a"), ("1-0", "a"), ("2-0", "b")):
        host.state.queue.put_nowait(entry(eid, UiUpdate(session_id="s1", update=update, request_id="r" + eid)))
    await asyncio.wait_for(d.process_forever(), 5)
    assert calls == ["1-0:a", "2-0:b"]
    recent = RecentIds(size=2)
    assert [recent.first_time(i) for i in ("1", "2", "1", "3", "1")] == [True, True, False, True, True]


async def test_a_broken_handler_is_not_retried(tmp_path: Path) -> None:
    host = Host(tmp_path)
    calls: list[str] = []

    async def broken(e: InboxEntry, _: UiUpdate) -> None:
        calls.append(e.entry_id)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        await dispatcher(host, {UiUpdate: broken}).handle_retrying(
            entry("1-0", UiUpdate(session_id="s1", update="", request_id="r1")))
    assert calls == ["1-0"]


async def test_an_injection_without_an_inbox_entry_is_queued_with_nothing_to_ack(tmp_path: Path) -> None:
    host = Host(tmp_path)
    host.inbox.barrier_passed = True
    await host.transcript.ensure_header()
    inj = Injection(session_id="s1", injection=RuntimeInjection(kind="system_update", content="x"),
                    source="client", source_id="form:f1:submitted")
    await dispatcher(host).injections.deliver(inj, None)
    [pending] = host.queue.pending.values()
    assert pending.source_id == "form:f1:submitted" and pending.entry_ids == []
    assert host.started == [] and host.acked == []  # no active task: waits for the next prompt


async def test_the_same_prompt_twice_at_a_wake_starts_one_turn_and_waits_for_its_record(tmp_path: Path) -> None:
    """Two inbox entries with one prompt id (an append retried, or an entry claimed from the last holder
    as it was also read) before the barrier: one turn, nothing steered; the other entry acked at once,
    the first left to the prompt's record (a crash before it redelivers that one)."""
    host = Host(tmp_path)
    d = dispatcher(host)
    await host.transcript.ensure_header()
    prompt = UserPrompt(session_id="s1", message="once")
    await d.handle(entry("1-0", prompt))
    await d.handle(entry("2-0", prompt))
    await d.pass_barrier()
    [turn] = host.started
    assert turn is not None and [p.entry_id for p in turn.prompts] == ["1-0"]
    host.busy()
    await d.handle(entry("3-0", prompt))  # once more while its run goes on
    await d.handle(entry("1-0", prompt))  # its own entry read again
    assert host.agent.queued() == [] and host.acked == ["2-0", "3-0"]
    pending = host.queue.pending_prompt(prompt.prompt_id)
    assert pending is not None and pending.entry_id == "1-0"


class IdleTurnsOnly:
    """The pending queue as the dispatcher may ask it: the idle turns, and a read of a prompt's."""

    def __init__(self, queue: Any) -> None:
        self.take_idle = queue.take_idle
        self.pending_prompt = queue.pending_prompt


async def test_a_prompt_reaches_the_pending_queue_through_the_turn_builder_only(tmp_path: Path) -> None:
    """Its turn is taken by the turn builder (turn_order.py): the dispatcher's own handle on the queue
    serves the idle turns and reads whether a prompt is on its way."""
    host = Host(tmp_path)
    d = dispatcher(host)
    d.queue = IdleTurnsOnly(host.queue)  # type: ignore[assignment]
    await host.transcript.ensure_header()
    await d.pass_barrier()
    prompt = UserPrompt(session_id="s1", message="once")
    await d.handle(entry("1-0", prompt))
    host.busy()
    await d.handle(entry("2-0", prompt))  # its twin, while its run goes on
    pending = host.queue.pending_prompt(prompt.prompt_id)
    assert len(host.started) == 1 and pending is not None and host.acked == ["2-0"]
    assert host.agent.queued() == []
