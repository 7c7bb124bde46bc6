"""The seed's delivery policy pinned (docs/architecture.md "Delivery, yield and the idle rules"): every injection kind in
every session state, through the real dispatcher, protocol and Agent (a running Agent is really
running: its model call waits). For each: where the injection lands (the Agent's steer queue, its
follow-up queue, the next-turn list, or a turn started for it) and whether it starts a turn.

The table is written out, not derived from `DELIVERY_BY_KIND`: the companion test changes each entry
of the map in turn to each other delivery and checks that the table no longer holds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from services.runtime.inbox.dispatcher import InboxDispatcher
from services.runtime.live.pending import TurnInput
from services.runtime.turns.delivery_rules import DELIVERY_BY_KIND
from shared.contracts.records.injection import INJECTION_KINDS, RuntimeInjection
from shared.contracts.records.messages import AssistantMessage
from shared.contracts.streams.inbox import Injection, UserPrompt
from shared.streams.inbox import InboxEntry
from tests.unit.runtime_fakes import Host, answer
from tests.unit.test_runtime_dispatcher import dispatcher

pytestmark = pytest.mark.timeout(60)

STATES = ("running", "idle, active task", "idle, no task")
# (kind, state) -> (where it lands, starts a turn). The seed's deliveryByKind, spelled out per state:
# steer before the next model call, follow_up when the run would stop, next_turn with the next user
# turn; on an idle session a steer or follow-up starts a turn only for an active task.
TABLE: dict[tuple[str, str], tuple[str, bool]] = {
    ("system_note", "running"): ("next_turn", False),
    ("system_note", "idle, active task"): ("next_turn", False),
    ("system_note", "idle, no task"): ("next_turn", False),
    ("system_guidance", "running"): ("steer", False),
    ("system_guidance", "idle, active task"): ("turn", True),
    ("system_guidance", "idle, no task"): ("next_turn", False),
    ("system_update", "running"): ("steer", False),
    ("system_update", "idle, active task"): ("turn", True),
    ("system_update", "idle, no task"): ("next_turn", False),
    ("client_view", "running"): ("next_turn", False),
    ("client_view", "idle, active task"): ("next_turn", False),
    ("client_view", "idle, no task"): ("next_turn", False),
    ("artifact_update", "running"): ("steer", False),
    ("artifact_update", "idle, active task"): ("turn", True),
    ("artifact_update", "idle, no task"): ("next_turn", False),
    ("workspace_update", "running"): ("steer", False),
    ("workspace_update", "idle, active task"): ("turn", True),
    ("workspace_update", "idle, no task"): ("next_turn", False),
    ("background_result", "running"): ("follow_up", False),
    ("background_result", "idle, active task"): ("turn", True),
    ("background_result", "idle, no task"): ("next_turn", False),
}


async def observe(tmp_path: Path, kind: str, state: str) -> tuple[str, bool]:
    """Deliver one `kind` injection to a session in `state`; where it landed, and whether a turn started."""
    calling, release = asyncio.Event(), asyncio.Event()

    async def waiting() -> AssistantMessage:
        calling.set()
        await release.wait()
        return answer()

    host = Host(tmp_path, steps=[waiting])
    host.inbox.barrier_passed = True
    await host.transcript.ensure_header()
    if state == "idle, active task":
        await host.todo.update([{"id": "t1", "content": "Build the deck", "status": "in_progress"}])
    d: InboxDispatcher = dispatcher(host)
    run: asyncio.Future[Any] | None = None
    if state == "running":
        turn = host.turns.build(TurnInput(prompt=UserPrompt(session_id="s1", message="go")))
        run = asyncio.ensure_future(host.agent.prompt(turn.messages))
        await calling.wait()  # the run's model call is under way
        host.busy()
    inj = Injection(session_id="s1", injection=RuntimeInjection(kind=kind, content=f"<{kind}>x</{kind}>"),
                    source="notification", source_id=f"{kind}-1", ref="file:a" if kind == "artifact_update" else None,
                    to_revision=1 if kind == "artifact_update" else None)
    await d.handle(InboxEntry(session_id="s1", entry_id="5-0", message=inj))
    message = next(p.message for p in host.queue.pending.values() if p.source_id == f"{kind}-1")
    landed = ("steer" if any(m is message for m in host.agent.steering()) else
              "follow_up" if any(m is message for m in host.agent.follow_ups()) else
              "next_turn" if any(m is message for m in host.queue.next_turn) else
              "turn" if any(m is message for t in host.started if t for m in t.messages) else "nowhere")
    started = bool(host.started)
    if run is not None:
        release.set()
        await asyncio.wait_for(run, 10)
    return landed, started


async def observed_table(tmp_path: Path, kinds: tuple[str, ...] = INJECTION_KINDS) -> dict[tuple[str, str], tuple[str, bool]]:
    out = {}
    for kind in kinds:
        for i, state in enumerate(STATES):
            path = tmp_path / f"{kind}-{i}"
            path.mkdir(parents=True)
            out[(kind, state)] = await observe(path, kind, state)
    return out


def test_the_table_covers_every_kind_and_state_and_the_map_is_the_seeds() -> None:
    assert {k for k, _ in TABLE} == set(INJECTION_KINDS) == set(DELIVERY_BY_KIND)
    assert len(TABLE) == len(INJECTION_KINDS) * len(STATES)


async def test_every_kind_lands_where_the_table_says(tmp_path: Path) -> None:
    observed = await observed_table(tmp_path)
    wrong = {key: (got, TABLE[key]) for key, got in observed.items() if got != TABLE[key]}
    assert not wrong, f"(kind, state): (observed, table): {wrong}"


@pytest.mark.parametrize("kind", INJECTION_KINDS)
async def test_changing_any_one_entry_of_the_map_breaks_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  kind: str) -> None:
    """The table pins the map: each single change of `kind`'s delivery is noticed (in some state)."""
    for other in ("steer", "follow_up", "next_turn"):
        if other == DELIVERY_BY_KIND[kind]:
            continue
        with monkeypatch.context() as m:
            m.setitem(DELIVERY_BY_KIND, kind, other)
            observed = await observed_table(tmp_path / other, (kind,))
        assert any(observed[(kind, state)] != TABLE[(kind, state)] for state in STATES), (
            f"{kind}: {DELIVERY_BY_KIND[kind]} -> {other} went unnoticed: {observed}")
