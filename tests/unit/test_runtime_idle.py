"""Idle recording with a merge window (services/runtime/inbox/idle.py): the window alone with a fake clock,
then the IdleRecorder in process over the real pending queue, turn builder, transcript and Recorder on a temp dir (only
the outbox is a fake, no Redis)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.runtime.inbox.delivery import InjectionDelivery
from services.runtime.inbox.idle import IdleRecorder, MergeWindow, touched_ref
from services.runtime.live.lease import LeaseLost
from services.runtime.live.pending import TurnInput
from services.runtime.runs.recorder import Recorder
from services.runtime.skillset.skill_lifecycle import SkillContracts
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import CustomMessage
from shared.contracts.streams.inbox import DocumentEdit, Injection, UserPrompt
from shared.streams.inbox import InboxEntry
from shared.trust.trusted_blocks import artifact_update
from tests.unit.runtime_fakes import Host

DECK = "gamma:file:d1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_window_slides_with_each_new_update_of_its_ref_up_to_the_cap() -> None:
    clock = Clock()
    w = MergeWindow(0.3, 1.0, clock)
    w.add("ref a", version="a@2")
    clock.now += 0.2
    w.add("ref a", version="a@2")  # the same update again (a redelivery): the window does not move
    assert w.next_due() == pytest.approx(100.3)
    w.add("ref a", version="a@3")  # a newer update replaced it: quiet for a window from now
    w.add("source n 1", merge=False)  # nothing to merge with: due at once
    assert w.due() == ["source n 1"] and w.next_due() == pytest.approx(100.2)
    w.done("source n 1")
    clock.now += 0.29
    assert w.due() == []
    clock.now += 0.01
    assert w.due() == ["ref a"]
    for v in range(4, 10):  # a burst that never pauses: recorded at the cap, 1.0 after the first update
        clock.now += 0.1
        w.add("ref a", version=f"a@{v}")
    assert w.next_due() == pytest.approx(101.0)
    w.done("ref a")
    assert len(w) == 0 and w.next_due() is None


def test_a_ref_put_off_gets_another_window_until_the_cap() -> None:
    clock = Clock()
    w = MergeWindow(0.3, 1.0, clock)
    w.add("ref a")
    clock.now += 0.3
    assert w.put_off("ref a") and w.due() == []  # due again at 0.6
    clock.now += 0.3
    assert w.due() == ["ref a"] and w.put_off("ref a")  # 0.9: still within the cap
    clock.now += 0.3
    assert not w.put_off("ref a")  # 1.2 would pass the cap of 1.0: recorded now
    assert w.due() == ["ref a"]


class Idle:
    """A live session past its wake barrier, no run: the real parts, a fake clock for the window."""

    def __init__(self, tmp_path: Path, busy: set[str] | None = None) -> None:
        self.host = h = Host(tmp_path)
        h.inbox.barrier_passed = True
        self.clock = Clock()
        contracts = SkillContracts(h.transcript, {}, h.outbox)  # type: ignore[arg-type]
        recorder = Recorder(h.sid, h.transcript, h.queue, h.outbox, h.ack, contracts, None,  # type: ignore[arg-type]
                            None, lambda: "m", lambda: h.agent.messages)
        self.busy = busy if busy is not None else set()

        async def is_busy(ref: str) -> bool:
            return ref in self.busy

        self.idle = IdleRecorder(h.state, h.queue, h.turns, h.agent, h.transcript, recorder.record,
                                 MergeWindow(0.3, 1.0, self.clock), is_busy)
        self.delivery = InjectionDelivery(h.state, h.queue, h.transcript, h, recorder.recorded, h.ack,
                                          held=lambda: None)

    async def deliver(self, inj: Injection, entry_id: str) -> None:
        await self.delivery.deliver(inj, entry_id)
        self.idle.hold()

    def updates(self) -> list[CustomMessage]:
        return [e for e in self.host.transcript.entries if getattr(e, "custom_type", "").startswith("gamma.")]  # type: ignore[misc]


def edit(ref: str, to_revision: int, from_revision: int = 1) -> Injection:
    content = artifact_update(ref, from_revision, to_revision, f"title is now v{to_revision}")
    return Injection(session_id="s1", injection=RuntimeInjection(kind="artifact_update", content=content),
                     source="artifact", source_id=f"{ref}@{to_revision}", ref=ref, from_revision=from_revision,
                     to_revision=to_revision)


def notification(source_id: str) -> Injection:
    return Injection(session_id="s1", injection=RuntimeInjection(kind="system_update", content=f"<system_update>{source_id}"
                     "</system_update>"), source="notification", source_id=source_id)


async def test_five_updates_of_one_ref_in_the_window_are_one_record_and_another_ref_its_own(tmp_path: Path) -> None:
    s = Idle(tmp_path)
    await s.deliver(edit("file:brief.xml", 2), "b2")
    for i in range(2, 7):
        s.clock.now += 0.05
        await s.deliver(edit(DECK, i), f"e{i}")
    assert await s.idle.flush_due() == 0  # 0.25 after the brief's update: both still open
    s.clock.now += 0.051
    assert await s.idle.flush_due() == 1  # the brief's window ended; the deck's slid with each edit
    [brief] = s.updates()
    assert brief.details["ref"] == "file:brief.xml" and s.host.acked == ["b2"]
    s.clock.now += 0.2
    assert await s.idle.flush_due() == 0  # 0.25 since the deck's last edit
    s.clock.now += 0.05
    assert await s.idle.flush_due() == 1  # quiet for a window since the deck's last edit
    deck = s.updates()[1]
    assert deck.details["ref"] == DECK and deck.details["toRevision"] == 6 and deck.details["fromRevision"] == 1
    assert s.host.acked == ["b2", "e2", "e3", "e4", "e5", "e6"]  # every merged entry, after the line
    last = s.host.agent.messages[-1]
    assert isinstance(last, CustomMessage) and last.details["toRevision"] == 6  # in the context too
    assert len(s.host.agent.messages) == 2 and not s.host.queue.next_turn


async def test_a_notification_is_recorded_at_once_and_next_turn_kinds_wait(tmp_path: Path) -> None:
    s = Idle(tmp_path)
    note = Injection(session_id="s1", injection=RuntimeInjection(kind="system_note", content="<system_note>n"
                     "</system_note>"), source="system", source_id="n1")
    await s.deliver(note, "n1")
    await s.deliver(notification("u1"), "u1")
    assert await s.idle.flush_due() == 1
    assert [u.custom_type for u in s.updates()] == ["gamma.system_update"] and s.host.acked == ["u1"]
    assert [m.custom_type for m in s.host.queue.next_turn] == ["gamma.system_note"]  # type: ignore[union-attr]


async def test_a_background_result_waits_for_the_next_turn(tmp_path: Path) -> None:
    s = Idle(tmp_path)
    done = Injection(session_id="s1", injection=RuntimeInjection(kind="background_result", content="<background_result>"
                     "k</background_result>"), source="system", source_id="k1")
    await s.deliver(done, "k1")
    s.clock.now += 5.0
    assert not s.idle.hold() and await s.idle.flush_due() == 0  # the idle rules: a follow-up is not recorded idle
    assert s.updates() == [] and s.host.acked == []
    assert [m.custom_type for m in s.host.queue.next_turn] == ["gamma.background_result"]  # type: ignore[union-attr]


async def test_a_prompt_before_the_window_ends_takes_the_update_into_its_run(tmp_path: Path) -> None:
    s = Idle(tmp_path)
    await s.deliver(edit(DECK, 2), "e2")
    turn = s.host.turns.build(TurnInput(prompt=UserPrompt(session_id="s1", message="hi"), entry_id="p1"))
    assert [m.details.get("ref") for m in turn.messages[:1]] == [DECK]  # type: ignore[union-attr]
    s.clock.now += 0.3
    assert await s.idle.flush_due() == 0 and s.updates() == [] and s.host.acked == []  # recorded once, by the run


async def test_nothing_is_recorded_during_a_run_and_the_run_task_end_arms_again(tmp_path: Path) -> None:
    s = Idle(tmp_path)
    await s.deliver(edit(DECK, 2), "e2")
    s.host.busy()  # a run task is active (it started without taking the next-turn list)
    s.clock.now += 0.3
    assert await s.idle.flush_due() == 0 and len(s.idle.window) == 0
    s.host._idle.set()
    await asyncio.sleep(0)
    assert s.idle.hold()  # what the run task's end calls (after_task)
    s.clock.now += 0.3
    assert await s.idle.flush_due() == 1 and s.host.acked == ["e2"]


async def test_a_ref_with_a_change_still_in_flight_waits_for_it_within_the_cap(tmp_path: Path) -> None:
    s = Idle(tmp_path, busy={DECK})
    await s.deliver(edit(DECK, 2), "e2")
    s.clock.now += 0.3
    assert await s.idle.flush_due() == 0  # the digest owes another update of the deck: it merges here
    await s.deliver(edit(DECK, 3), "e3")
    s.busy.clear()
    s.clock.now += 0.3
    assert await s.idle.flush_due() == 1
    [deck] = s.updates()
    assert deck.details["toRevision"] == 3 and s.host.acked == ["e2", "e3"]


async def test_a_failed_record_is_put_back_unacked_and_recorded_later(tmp_path: Path) -> None:
    s = Idle(tmp_path)
    await s.deliver(notification("u1"), "u1")
    s.host.lease.lost = True
    with pytest.raises(LeaseLost):
        await s.idle.flush_due()
    assert s.host.acked == [] and len(s.host.queue.next_turn) == 1 and s.host.agent.messages == []
    s.host.lease.lost = False
    assert s.idle.hold() and await s.idle.flush_due() == 1
    assert s.host.acked == ["u1"] and len(s.host.agent.messages) == 1 and not s.host.queue.next_turn


async def test_the_timer_records_after_the_window_on_the_loop_clock(tmp_path: Path) -> None:
    h = Host(tmp_path)
    h.inbox.barrier_passed = True
    contracts = SkillContracts(h.transcript, {}, h.outbox)  # type: ignore[arg-type]
    recorder = Recorder(h.sid, h.transcript, h.queue, h.outbox, h.ack, contracts, None,  # type: ignore[arg-type]
                        None, lambda: "m", lambda: h.agent.messages)
    idle = IdleRecorder(h.state, h.queue, h.turns, h.agent, h.transcript, recorder.record,
                        MergeWindow(0.1, 1.0, asyncio.get_running_loop().time))
    delivery = InjectionDelivery(h.state, h.queue, h.transcript, h, recorder.recorded, h.ack, held=idle.arm)
    for i in range(2, 5):
        await delivery.deliver(edit(DECK, i), f"e{i}")
    await asyncio.sleep(0.05)
    assert h.acked == []
    await asyncio.sleep(0.3)
    assert h.acked == ["e2", "e3", "e4"] and len(h.transcript.entries) == 1


async def test_a_client_write_of_the_ref_handled_or_queued_keeps_its_update_held(tmp_path: Path) -> None:
    """The proxy numbers a write (the causal in-flight set) only once the runtime answered it: until
    then the runtime's own view says another update of the ref is coming."""
    s = Idle(tmp_path)
    await s.deliver(edit(DECK, 2), "e2")
    s.clock.now += 0.1
    write = DocumentEdit(session_id="s1", doc="d1", op="patch", document={})
    assert touched_ref(write) == DECK
    handled: list[str] = []

    async def document_edit(entry: InboxEntry, m: DocumentEdit) -> None:
        handled.append(entry.entry_id)

    watched = s.idle.watch_writes({DocumentEdit: document_edit})
    await watched[DocumentEdit](InboxEntry(session_id="s1", entry_id="w1", message=write), write)
    assert handled == ["w1"]  # handled 0.1 after the update: due two windows from now, at 0.7
    s.clock.now += 0.3
    assert await s.idle.flush_due() == 0
    s.clock.now += 0.3
    s.host.state.queue.put_nowait(InboxEntry(session_id="s1", entry_id="w2", message=write))  # the next one, unread
    assert await s.idle.flush_due() == 0  # put off while queued, to the cap (1.0)
    s.host.state.queue.get_nowait()
    s.clock.now += 0.3
    assert await s.idle.flush_due() == 1 and s.host.acked == ["e2"]
