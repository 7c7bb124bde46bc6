"""Concurrent appends to one transcript (parallel tool calls each activating a skill, while the guard
awaits a lease renewal) stay one chain, in file order, with timestamps that never go back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from tests.reliability.workload import Audit, read_transcript_file


async def test_concurrent_appends_through_an_awaiting_guard_never_fork(tmp_path: Path) -> None:
    delays = iter([0.0, 0.05, 0.01, 0.03, 0.0, 0.02, 0.04])

    async def slow_guard() -> None:  # a renewal round trip whose replies come back out of order
        await asyncio.sleep(next(delays, 0.0))

    t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(slow_guard))
    await t.ensure_header()
    made = await asyncio.gather(*(t.append_skill(f"skill-{i}", "reference", None) for i in range(6)))
    audit = Audit()
    entries = read_transcript_file(tmp_path / "transcript.jsonl", audit)
    assert audit.stale_writes == [] and audit.corrupt == [] and len(entries) == 7
    assert [e["parentId"] for e in entries[1:]] == [e["id"] for e in entries[:-1]]
    assert [e["timestamp"] for e in entries] == sorted(e["timestamp"] for e in entries)
    # What the callers got back is what was written.
    assert {e.id: e.parent_id for e in made} == {e["id"]: e["parentId"] for e in entries[1:]}
    reloaded = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard(slow_guard))
    assert [e.id for e in reloaded.entries] == [e.id for e in t.entries]
