"""The session's lifecycle (services/runtime/hosting/lifecycle.py): a closed state machine, and the session's
verbs over it (session.py `go_live`, `deliver`, `close`, `drop`), built in process with a fake outbox
and lease over a real Redis."""

from __future__ import annotations

import asyncio
from itertools import product
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from scripted.gamma import ScriptedGamma
from scripted.transport import scripted_client
from services.runtime.hosting.lifecycle import CLOSED, MOVES, WRITABLE, BadMove, Lifecycle, Phase
from services.runtime.hosting.session import Session
from services.runtime.hosting.session_deps import SessionDeps
from services.runtime.hosting.session_files import SessionFiles
from services.runtime.hosting.wake_timing import WakeClock
from services.runtime.live.lease import LeaseLost
from services.runtime.model.openai_stream import ModelSettings
from shared.contracts.streams.inbox import UiUpdate
from shared.contracts.streams.lifecycle import SessionDormant, SessionLive
from shared.history.tokens import TokenCounter
from shared.redis import keys
from shared.settings import Settings
from shared.storage.disk import session_paths
from shared.streams.inbox import InboxEntry
from tests.unit.runtime_fakes import FakeLease, FakeOutbox

CLOSE_PATH = [Phase.STOPPING, Phase.SEALING, Phase.CLOSED]


def test_each_phase_moves_only_where_the_machine_says() -> None:
    for start, to in product(Phase, Phase):
        life = Lifecycle()
        for step in _path_to(start):
            life.move(step)
        if to in MOVES[start]:
            assert life.move(to) is start and life.phase is to
        else:
            with pytest.raises(BadMove):
                life.move(to)
            assert life.phase is start


def test_closed_and_dropped_are_terminal_and_every_phase_is_reachable() -> None:
    assert MOVES[Phase.CLOSED] == MOVES[Phase.DROPPED] == frozenset()
    reached, frontier = {Phase.OPENING}, [Phase.OPENING]
    while frontier:
        for to in MOVES[frontier.pop()] - reached:
            reached.add(to)
            frontier.append(to)
    assert reached == set(Phase)


def test_what_each_phase_lets_through() -> None:
    # The loops see a session closed from the sealing on; its own writes go through until it is closed.
    assert {p for p in Phase if p in CLOSED} == {Phase.SEALING, Phase.CLOSED, Phase.DROPPED}
    assert {p for p in Phase if p in WRITABLE} == {Phase.OPENING, Phase.LIVE, Phase.STOPPING, Phase.SEALING}
    life = Lifecycle()
    assert not life.closed and life.writable and not life.ended
    life.move(Phase.STOPPING)
    assert not life.closed and life.writable  # the run's last writes and status still go out
    life.move(Phase.SEALING)
    assert life.closed and life.writable  # the close's own last writes (the UI state)
    life.move(Phase.CLOSED)
    assert life.closed and not life.writable and life.ended


async def test_a_close_begins_once_and_a_drop_ends_whatever_has_not() -> None:
    life = Lifecycle()
    task = asyncio.ensure_future(asyncio.sleep(0))
    life.live(task)
    assert life.phase is Phase.LIVE and life.loop_task is task
    assert life.stop() and not life.stop()  # a second close of the same session does nothing
    assert life.drop() and life.phase is Phase.DROPPED and not life.drop()
    with pytest.raises(BadMove):
        life.live(task)  # never reopened: a new wake builds a new session
    await task


async def ack(_sid: str, _entry_id: str) -> None:
    return None


def build(tmp_path: Path, client: aioredis.Redis) -> Session:
    settings = Settings(data_dir=tmp_path, context_window=50_000)
    deps = SessionDeps(settings=settings, client=client, model_client=scripted_client(ScriptedGamma()), skills={},
                       system_prompt="sys", counter=TokenCounter(), ack=ack)
    paths = session_paths(tmp_path, "s1")
    paths.workspace.mkdir(parents=True, exist_ok=True)
    return Session(deps, paths, SessionFiles.read(paths), FakeLease("s1"), FakeOutbox(), ModelSettings(model="m1"), "w1",  # type: ignore[arg-type]
                   context_window=8_000)


def entry(entry_id: str) -> InboxEntry:
    return InboxEntry(session_id="s1", entry_id=entry_id, message=UiUpdate(session_id="s1", update="AA=="))


async def test_live_then_closed_the_session_goes_dormant_once(tmp_path: Path, redis_client: aioredis.Redis) -> None:
    session = build(tmp_path, redis_client)
    await session.restore()
    gate = asyncio.Event()
    await session.go_live("w-a", gate.wait, WakeClock())
    outbox, lease = session.outbox, session.lease
    assert session.life.phase is Phase.LIVE and isinstance(outbox, FakeOutbox) and isinstance(lease, FakeLease)
    assert [type(s[2]) for s in outbox.sent if s[0] == "publish"] == [SessionLive]
    assert session.deliver(entry("1-0")) and session.state.queue.qsize() == 1
    loop_task = session.life.loop_task
    assert loop_task is not None and not loop_task.done()

    assert await session.close("idle")
    assert session.life.phase is Phase.CLOSED and loop_task.cancelled() and lease.released
    dormant = [s[2] for s in outbox.sent if s[0] == "publish" and isinstance(s[2], SessionDormant)]
    assert [d.reason for d in dormant] == ["idle"]
    assert outbox.events("status")[-1]["status"] == "dormant"
    assert await redis_client.zscore(keys.DORMANT_DUE, "s1") is not None  # its streams go after the retention
    assert not session.deliver(entry("2-0"))  # read after the close: left pending for the next holder
    with pytest.raises(LeaseLost):
        await session.guard.write(lambda: None)  # nothing is written after the release
    sent = len(outbox.sent)
    assert not await session.close("idle") and len(outbox.sent) == sent


async def test_a_dropped_session_stops_and_neither_writes_nor_says_anything(tmp_path: Path,
                                                                           redis_client: aioredis.Redis) -> None:
    session = build(tmp_path, redis_client)
    await session.restore()
    await session.go_live("w-a", asyncio.Event().wait, WakeClock())
    outbox, lease = session.outbox, session.lease
    assert isinstance(outbox, FakeOutbox) and isinstance(lease, FakeLease)
    sent = len(outbox.sent)
    await session.drop()
    assert session.life.phase is Phase.DROPPED and session.state.closed
    assert len(outbox.sent) == sent and not lease.released
    assert not session.deliver(entry("1-0"))
    with pytest.raises(LeaseLost):
        await session.guard.write(lambda: None)
    assert not await session.close("idle")  # the next holder has it: no dormant announcement


async def test_a_drop_during_the_announcement_starts_no_loop(tmp_path: Path, redis_client: aioredis.Redis) -> None:
    session = build(tmp_path, redis_client)
    await session.restore()
    started: list[bool] = []

    async def loop() -> None:
        started.append(True)

    await session.drop()
    await session.go_live("w-a", loop, WakeClock())
    assert session.life.loop_task is None and started == [] and session.life.phase is Phase.DROPPED


def _path_to(phase: Phase) -> list[Phase]:
    return {Phase.OPENING: [], Phase.LIVE: [Phase.LIVE], Phase.STOPPING: CLOSE_PATH[:1],
            Phase.SEALING: CLOSE_PATH[:2], Phase.CLOSED: CLOSE_PATH, Phase.DROPPED: [Phase.DROPPED]}[phase]
