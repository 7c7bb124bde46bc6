"""Delivery as one pure decision (services/runtime/turns/delivery_rules.py, docs/architecture.md "Delivery, yield
and the idle rules"): its whole table pinned cell by cell, injections and prompts, written out rather
than derived, its sets of moments and actions closed, and the paths that deliver shown to ask it (a cell
changed in the table changes what routing, a prompt's dispatch, idle turns and idle recording do). tests/unit/test_delivery_policy.py checks the
same rules end to end through the real dispatcher and Agent. Every way into the running Agent asks it
and enters through `into_run`: a prompt's dispatch, a turn meeting a run, a failed run's prompts, a
skill rule's guidance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.runtime.engine import reply_rules
from services.runtime.turns import delivery_rules
from services.runtime.turns.delivery_rules import (
    DELIVERY_BY_KIND,
    Action,
    Prompt,
    When,
    decide,
    into_run,
    moment,
)
from shared.contracts.records.injection import INJECTION_KINDS, RuntimeInjection
from shared.contracts.records.messages import CustomMessage, UserMessage
from shared.contracts.streams.inbox import Injection, UserPrompt
from shared.streams.inbox import InboxEntry
from tests.unit.runtime_fakes import Host, build
from tests.unit.test_runtime_dispatcher import dispatcher
from tests.unit.test_runtime_protocol import controller, inj

R, T, IDLE, H = When.RUNNING, When.IDLE_TASK_ACTIVE, When.IDLE, When.HELD
# kind -> (running, idle with a task active, idle with none, held before the wake barrier)
TABLE: dict[str, tuple[Action, Action, Action, Action]] = {
    "system_note": (Action.NEXT_TURN, Action.NEXT_TURN, Action.NEXT_TURN, Action.NEXT_TURN),
    "system_guidance": (Action.STEER, Action.START_TURN, Action.RECORD_IDLE, Action.HOLD),
    "system_update": (Action.STEER, Action.START_TURN, Action.RECORD_IDLE, Action.HOLD),
    "client_view": (Action.NEXT_TURN, Action.NEXT_TURN, Action.NEXT_TURN, Action.NEXT_TURN),
    "artifact_update": (Action.STEER, Action.START_TURN, Action.RECORD_IDLE, Action.HOLD),
    "workspace_update": (Action.STEER, Action.START_TURN, Action.RECORD_IDLE, Action.HOLD),
    "background_result": (Action.FOLLOW_UP, Action.START_TURN, Action.NEXT_TURN, Action.HOLD),
}


# a prompt's on_busy -> the same four moments
PROMPTS: dict[str, tuple[Action, Action, Action, Action]] = {
    "steer": (Action.STEER, Action.START_TURN, Action.START_TURN, Action.HOLD),
    "follow_up": (Action.FOLLOW_UP, Action.START_TURN, Action.START_TURN, Action.HOLD),
    "reject": (Action.REJECT, Action.START_TURN, Action.START_TURN, Action.HOLD),
    "interrupt": (Action.INTERRUPT, Action.START_TURN, Action.START_TURN, Action.HOLD),
}


# an accepted prompt's on_busy (its turn built, or a failed run took it) -> the same four moments
ACCEPTED: dict[str, tuple[Action, Action, Action, Action]] = {
    "steer": (Action.STEER, Action.START_TURN, Action.START_TURN, Action.HOLD),
    "follow_up": (Action.FOLLOW_UP, Action.START_TURN, Action.START_TURN, Action.HOLD),
    "reject": (Action.STEER, Action.START_TURN, Action.START_TURN, Action.HOLD),
    "interrupt": (Action.STEER, Action.START_TURN, Action.START_TURN, Action.HOLD),
}


@pytest.mark.parametrize("kind", INJECTION_KINDS)
def test_every_cell_of_the_table(kind: str) -> None:
    assert tuple(decide(kind, when) for when in (R, T, IDLE, H)) == TABLE[kind]


@pytest.mark.parametrize("on_busy", sorted(PROMPTS))
def test_every_cell_of_the_prompt_table(on_busy: str) -> None:
    assert tuple(decide(Prompt(on_busy), when) for when in (R, T, IDLE, H)) == PROMPTS[on_busy]  # type: ignore[arg-type]


@pytest.mark.parametrize("on_busy", sorted(ACCEPTED))
def test_every_cell_of_the_accepted_prompt_table(on_busy: str) -> None:
    cells = tuple(decide(Prompt(on_busy, accepted=True), when) for when in (R, T, IDLE, H))  # type: ignore[arg-type]
    assert cells == ACCEPTED[on_busy]


def test_the_sets_are_closed_and_every_kind_has_a_delivery() -> None:
    assert set(TABLE) == set(INJECTION_KINDS) == set(DELIVERY_BY_KIND)
    assert set(PROMPTS) == set(UserPrompt.model_fields["on_busy"].annotation.__args__)  # type: ignore[union-attr]
    assert {a.name for a in Action} == {"STEER", "FOLLOW_UP", "START_TURN", "RECORD_IDLE", "NEXT_TURN", "HOLD",
                                        "REJECT", "INTERRUPT"}
    assert set(When) == {R, T, IDLE, H}
    assert {(d, w) for d in ("steer", "follow_up", "next_turn") for w in When} == set(delivery_rules.RULES)
    assert {(b, w) for b in PROMPTS for w in When} == set(delivery_rules.PROMPT_RULES)
    assert set(delivery_rules.PROMPT_RULES) == set(delivery_rules.ACCEPTED_RULES)


def test_the_moment_held_before_running_before_idle() -> None:
    asked: list[bool] = []

    def active() -> bool:
        asked.append(True)
        return True

    assert moment(held=True, running=True, active_task=active) is H
    assert moment(held=False, running=True, active_task=active) is R and asked == []  # asked only when idle
    assert moment(held=False, running=False, active_task=active) is T
    assert moment(held=False, running=False, active_task=lambda: False) is IDLE


def test_routing_asks_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert controller(tmp_path / "a").route_update(inj("system_update", "u1"), "e1") is Action.RECORD_IDLE
    monkeypatch.setitem(delivery_rules.RULES, ("steer", IDLE), Action.NEXT_TURN)
    routed = controller(tmp_path / "b")
    assert routed.route_update(inj("system_update", "u1"), "e1") is Action.NEXT_TURN
    assert routed.recordable() == []  # idle recording asks it too: no longer recorded without a turn


def test_idle_turns_ask_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = controller(tmp_path / "a", active_task=True)
    c.route_update(inj("background_result", "b1", source="system"), "e1")
    monkeypatch.setitem(delivery_rules.RULES, ("follow_up", T), Action.NEXT_TURN)
    assert c.take_idle() is None and c.take_idle(When.IDLE_TASK_ACTIVE) is None
    assert len(c.next_turn) == 1  # it waits for the next user turn instead
    monkeypatch.setitem(delivery_rules.RULES, ("follow_up", T), Action.START_TURN)
    turn = c.take_idle()
    assert turn is not None and len(turn.messages) == 1 and c.next_turn == []


async def test_a_prompt_is_dispatched_as_the_table_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running session: a `steer` prompt goes to the steer queue; with its cell changed to FOLLOW_UP,
    to the follow-up queue; changed to REJECT, the client is told `busy` and nothing is queued."""
    host = Host(tmp_path)
    d = dispatcher(host)
    await d.pass_barrier()
    host.busy()
    moved = {Action.STEER: "steer", Action.FOLLOW_UP: "follow_up", Action.REJECT: None}
    for i, (action, into) in enumerate(moved.items()):
        monkeypatch.setitem(delivery_rules.PROMPT_RULES, ("steer", R), action)
        prompt = UserPrompt(session_id="s1", message=f"p{i}")
        await d.on_prompt(InboxEntry(entry_id=f"{i}-0", session_id="s1", message=prompt), prompt)
        queues = {"steer": host.agent.steering(), "follow_up": host.agent.follow_ups()}
        landed = [name for name, q in queues.items() if any(getattr(m, "content", None) == f"p{i}" for m in q)]
        assert landed == ([into] if into else [])
    assert host.outbox.events("error") == [{"error": "busy", "promptId": prompt.prompt_id}]


async def test_an_injection_is_delivered_as_the_table_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """InjectionDelivery asks the same table: a steer kind on an idle session with no task is held for
    idle recording; its cell changed to START_TURN, a run starts for it."""
    host = Host(tmp_path)
    d = dispatcher(host)
    await d.pass_barrier()
    monkeypatch.setitem(delivery_rules.RULES, ("steer", IDLE), Action.START_TURN)
    await d.injections.deliver(Injection(session_id="s1", source="artifact", source_id="u1",
                                         injection=RuntimeInjection(kind="system_update", content="x")), "1-0")
    assert len(host.started) == 1 and host.started[0] is not None


def test_without_an_active_task_nothing_held_starts_a_turn(tmp_path: Path) -> None:
    c = controller(tmp_path)
    c.route_update(inj("system_update", "u1"), "e1", hold=True)
    c.route_update(inj("background_result", "b1", source="system"), "e2", hold=True)
    assert c.take_idle() is None
    assert [m.details["sourceId"] for m in c.recordable()] == ["u1"]  # the steer kind is recorded idle


def test_into_run_is_the_one_way_into_the_running_agent(tmp_path: Path) -> None:
    """STEER and FOLLOW_UP enter the Agent's two queues; every other action enters nothing (the caller
    acts on it). No runtime module but this one calls the queues itself."""
    c = controller(tmp_path)
    a, b = UserMessage(content="a"), UserMessage(content="b")
    assert into_run(c.agent, Action.STEER, [a]) and into_run(c.agent, Action.FOLLOW_UP, [b])
    assert c.agent.steering() == (a,) and c.agent.follow_ups() == (b,)
    for action in set(Action) - {Action.STEER, Action.FOLLOW_UP}:
        assert not into_run(c.agent, action, [a])
    assert c.agent.queued() == [a, b]
    runtime = Path(delivery_rules.__file__).parents[1]
    calls = re.compile(r"\.(steer|follow_up)\(")
    callers = {str(f.relative_to(runtime)) for f in runtime.rglob("*.py") if calls.search(f.read_text(encoding="utf-8"))}
    assert callers == set(), callers  # delivery_rules.py takes the bound methods: `into = agent.steer`


def test_a_turn_that_meets_a_run_joins_it_as_the_table_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn built for the idle session, a run started meanwhile (supervisor.py `start_run`): a prompt's
    turn as one by its accepted on_busy, an injection's turn each by its kind while running."""
    c = controller(tmp_path, active_task=True)
    turn = build(c, UserPrompt(session_id="s", message="later", on_busy="follow_up"), "e1")
    c.join_run(turn)
    assert c.agent.follow_ups() == tuple(turn.messages) and c.agent.steering() == ()
    rejecting = build(c, UserPrompt(session_id="s", message="now", on_busy="reject"), "e2")
    c.join_run(rejecting)  # accepted: too late to refuse it
    assert c.agent.steering() == tuple(rejecting.messages)
    c.agent.take_queued()
    c.route_update(inj("system_update", "u1"), "e3")
    c.route_update(inj("background_result", "b1", source="system"), "e4")
    idle_turn = c.take_idle()
    assert idle_turn is not None
    monkeypatch.setitem(delivery_rules.RULES, ("steer", R), Action.NEXT_TURN)
    c.join_run(idle_turn)
    assert [m.details["sourceId"] for m in c.agent.follow_ups()] == ["b1"] and c.agent.steering() == ()
    assert [m.details["sourceId"] for m in c.next_turn] == ["u1"]  # its cell changed: it waits


def test_the_prompts_a_failed_run_took_go_back_as_the_table_says(tmp_path: Path) -> None:
    """supervisor.py `recover`: each prompt a failed run had taken re-enters the next run by its accepted
    on_busy (a follow-up stays a follow-up)."""
    c = controller(tmp_path)
    first = build(c, UserPrompt(session_id="s", message="first"), "e1").messages
    steered = build(c, UserPrompt(session_id="s", message="steered", on_busy="interrupt"), "e2", busy=True).messages
    followed = build(c, UserPrompt(session_id="s", message="followed", on_busy="follow_up"), "e3", busy=True).messages
    c.rejoin_untaken(first)  # the run took both from the queues, then failed
    assert c.agent.steering() == (steered[-1],) and c.agent.follow_ups() == (followed[-1],)


def test_a_skill_rules_guidance_is_delivered_as_the_table_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """skill_rules.py's guidance and activations, one `system_guidance` delivery (pending_queue.py `inject`):
    steered during a run; its cell changed, the next-turn list."""
    c = controller(tmp_path)
    messages = [CustomMessage(custom_type="gamma.system_guidance", content="g"),
                CustomMessage(custom_type="gamma.active_skill", content="s")]
    c.agent._running = True  # the skill rules are asked in a run's batch preflight
    assert c.inject("system_guidance", messages) is Action.STEER and list(c.agent.steering()) == messages
    c.agent.take_queued()
    monkeypatch.setitem(delivery_rules.RULES, ("steer", R), Action.NEXT_TURN)
    assert c.inject("system_guidance", messages) is Action.NEXT_TURN and c.next_turn == messages
    assert c.agent.queued() == []


def test_the_loops_own_guidance_goes_where_the_table_puts_its_kind() -> None:
    """The reply rules' nudges (engine/reply_rules.py) are put before the next model call by the loop
    itself, below the table: where `decide` puts their kind during a run."""
    for nudge in (reply_rules.empty_guidance(), reply_rules.length_guidance()):
        kind = nudge.details["injectionType"]
        assert decide(kind, R) is Action.STEER
