"""The wake's path off the event loop and out of the wake handler (docs/architecture.md "The wake"):
the disk fence's claim syncs in the I/O pool, a new transcript's first lines are one write, and the
live status and inbox registration run in the session's own task (wake_timing.py `start_reading`)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from services.runtime.hosting.session import Session
from services.runtime.hosting.wake_timing import WakeClock, start_reading
from services.runtime.live import diskfence as diskfence_module
from services.runtime.live.diskfence import DiskFence, FenceBehind
from services.runtime.store import transcript as transcript_module
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.streams.inbox import InboxReader
from tests.support.wake_doubles import RecordingReader, WakingSession


async def test_the_claim_syncs_the_fence_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[threading.Thread] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        threads.append(threading.current_thread())
        real(fd)

    monkeypatch.setattr(diskfence_module.os, "fsync", fsync)
    fence = DiskFence(tmp_path / "s" / ".fence", "s", 5)
    await fence.claim()
    assert threads and all(t is not threading.main_thread() for t in threads)
    assert fence.stored() == 5
    older = DiskFence(tmp_path / "s" / ".fence", "s", 4)
    with pytest.raises(FenceBehind):
        await older.claim()
    assert older.stored() == 5  # a newer stored fence is never overwritten
    fence.close()
    older.close()


async def test_a_new_transcripts_first_lines_are_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[int] = []
    real = transcript_module.append_lines_unsynced

    def counting(path: Path, lines: list[Any]) -> Any:
        writes.append(len(lines))
        return real(path, lines)

    guard = WriteGuard()
    monkeypatch.setattr(transcript_module, "append_lines_unsynced", counting)
    t = Transcript.load(tmp_path / "transcript.jsonl", guard)
    await t.ensure_header([("workflow", "workflow"), ("notes", "reference")])
    await t.ensure_header([("again", "reference")])  # a header exists: nothing more
    assert writes == [3]
    reloaded = Transcript.load(tmp_path / "transcript.jsonl", guard)
    assert [e.id for e in reloaded.entries] == [e.id for e in t.entries]
    assert [e.parent_id for e in reloaded.entries[1:]] == [e.id for e in reloaded.entries[:-1]]
    assert [s.name for s in reloaded.active_skills()] == ["workflow", "notes"]
    assert all(s.preloaded for s in reloaded.active_skills())


async def test_reading_starts_after_the_live_status_with_the_claimed_entries_first() -> None:
    session, reader = WakingSession(), RecordingReader(pending=["left-by-a-dead-holder"])
    clock = WakeClock()
    assert await start_reading(cast(InboxReader, reader), cast(Session, session), clock)
    assert [t for t, _ in session.outbox.events] == ["status"]
    assert session.outbox.events[0][1]["status"] == "live"
    assert reader.reading == {session.sid}
    assert session.state.queue.get_nowait() == "left-by-a-dead-holder"
    assert set(clock.fields()) >= {"wake_ms", "status_ms", "reader_ms"}


async def test_a_close_during_the_registration_leaves_nothing_read() -> None:
    session = WakingSession()
    reader = RecordingReader(pending=["x"], on_add=lambda: setattr(session.state, "closed", True))
    assert not await start_reading(cast(InboxReader, reader), cast(Session, session), WakeClock())
    assert reader.reading == set() and session.state.queue.empty()


def test_the_wake_clock_keeps_each_steps_own_duration() -> None:
    clock = WakeClock()
    clock.mark("lease")
    clock.mark("claim")
    fields = clock.fields()
    assert set(fields) == {"wake_ms", "lease_ms", "claim_ms"}
    assert fields["wake_ms"] >= fields["lease_ms"] + fields["claim_ms"] - 0.2
