"""The runtime's per-session inbox queue counts the queued changes of each ref (idle.py reads it)."""

from __future__ import annotations

import asyncio

import pytest

from services.runtime.live.inbox_queue import InboxQueue
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.inbox import DocumentEdit, FileDelete, FileWrite, Injection, UserPrompt
from shared.streams.inbox import InboxEntry

DECK = "gamma:file:d1"


def entry(eid: str, message: object) -> InboxEntry:
    return InboxEntry(session_id="s1", entry_id=eid, message=message)


def edit() -> DocumentEdit:
    return DocumentEdit(session_id="s1", doc="d1", op="patch", document={})


async def test_each_queued_change_of_a_ref_is_counted_until_it_is_taken() -> None:
    q = InboxQueue()
    q.put_nowait(entry("1", edit()))
    q.put_nowait(entry("2", UserPrompt(session_id="s1", message="hi")))
    q.put_nowait(entry("3", edit()))
    q.put_nowait(entry("4", FileWrite(session_id="s1", path="a.txt", blob="b1", sha256="0" * 64, size=1)))
    assert (q.queued_changes(DECK), q.queued_changes("file:a.txt"), q.qsize()) == (2, 1, 4)
    assert (await q.get()).entry_id == "1" and q.queued_changes(DECK) == 1
    assert q.get_nowait().entry_id == "2" and q.queued_changes(DECK) == 1
    assert q.get_nowait().entry_id == "3" and q.queued_changes(DECK) == 0
    q.put_nowait(entry("5", FileDelete(session_id="s1", path="a.txt")))
    assert q.queued_changes("file:a.txt") == 2
    q.get_nowait(), q.get_nowait()
    assert q.empty() and q.queued_changes("file:a.txt") == 0 and q.queued_changes("file:b.txt") == 0


async def test_a_digest_update_counts_for_its_ref() -> None:
    q = InboxQueue()
    update = RuntimeInjection(kind="artifact_update", content="changed")
    q.put_nowait(entry("1", Injection(session_id="s1", injection=update, source="artifact", source_id="v2", ref=DECK)))
    assert q.queued_changes(DECK) == 1


async def test_a_get_cancelled_while_waiting_takes_nothing() -> None:
    q = InboxQueue()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(q.get(), 0.01)
    q.put_nowait(entry("1", edit()))
    assert q.queued_changes(DECK) == 1 and (await q.get()).entry_id == "1" and q.queued_changes(DECK) == 0
