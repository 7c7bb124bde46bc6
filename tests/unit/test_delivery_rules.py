"""Delivery as one pure decision (services/runtime/turns/delivery_rules.py, docs/architecture.md "Delivery, yield
and the idle rules"): its whole table pinned cell by cell, written out rather than derived, its sets of
moments and actions closed, and the paths that deliver shown to ask it (a cell changed in the table
changes what routing, idle turns and idle recording do). tests/unit/test_delivery_policy.py checks the
same rules end to end through the real dispatcher and Agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime.turns import delivery_rules
from services.runtime.turns.delivery_rules import DELIVERY_BY_KIND, Action, When, decide, moment
from shared.contracts.injection import INJECTION_KINDS
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


@pytest.mark.parametrize("kind", INJECTION_KINDS)
def test_every_cell_of_the_table(kind: str) -> None:
    assert tuple(decide(kind, when) for when in (R, T, IDLE, H)) == TABLE[kind]


def test_the_sets_are_closed_and_every_kind_has_a_delivery() -> None:
    assert set(TABLE) == set(INJECTION_KINDS) == set(DELIVERY_BY_KIND)
    assert {a.name for a in Action} == {"STEER", "FOLLOW_UP", "START_TURN", "RECORD_IDLE", "NEXT_TURN", "HOLD"}
    assert set(When) == {R, T, IDLE, H}
    assert {(d, w) for d in ("steer", "follow_up", "next_turn") for w in When} == set(delivery_rules.RULES)


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
    assert c.idle_turn_due() and c.take_idle_peek()
    monkeypatch.setitem(delivery_rules.RULES, ("follow_up", T), Action.NEXT_TURN)
    assert not c.idle_turn_due() and not c.take_idle_peek() and c.take_idle().messages == []
    assert len(c.next_turn) == 1  # it waits for the next user turn instead


def test_without_an_active_task_nothing_held_starts_a_turn(tmp_path: Path) -> None:
    c = controller(tmp_path)
    c.route_update(inj("system_update", "u1"), "e1", hold=True)
    c.route_update(inj("background_result", "b1", source="system"), "e2", hold=True)
    assert not c.idle_turn_due()
    assert [m.details["sourceId"] for m in c.recordable()] == ["u1"]  # the steer kind is recorded idle
