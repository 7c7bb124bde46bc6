"""The entries read from one session's inbox and not handled yet, in order (the dispatcher takes them
one at a time, dispatcher.py), with how many of them write or update each ref: idle recording
(idle.py) puts off an update while another change of its ref is queued, so that it merges into one."""

from __future__ import annotations

import asyncio
from collections import Counter

from shared.contracts.streams.inbox import DocumentDelete, DocumentEdit, FileDelete, FileWrite, Injection
from shared.streams.inbox import InboxEntry


def touched_ref(m: object) -> str | None:
    """The ref an inbox entry changes or updates: a client's write of a file or a deck (named as the
    proxy names their changes, services/proxy/artifacts.py `file_ref`, `document_ref`), or a digest's
    update of it."""
    if isinstance(m, FileWrite | FileDelete):
        return f"file:{m.path}"
    if isinstance(m, DocumentEdit | DocumentDelete):
        return f"gamma:file:{m.doc}"
    if isinstance(m, Injection):
        return m.ref
    return None


class InboxQueue:
    """An asyncio.Queue of inbox entries that counts the queued ones per ref they touch. Every entry
    goes in and out through these methods, so the count is exact whenever the event loop runs."""

    def __init__(self) -> None:
        self._entries: asyncio.Queue[InboxEntry] = asyncio.Queue()
        self._refs: Counter[str] = Counter()

    def put_nowait(self, entry: InboxEntry) -> None:
        self._entries.put_nowait(entry)
        if (ref := touched_ref(entry.message)) is not None:
            self._refs[ref] += 1

    async def get(self) -> InboxEntry:
        # Nothing is awaited between the take and the count: a cancelled get takes nothing (asyncio.Queue).
        return self._taken(await self._entries.get())

    def get_nowait(self) -> InboxEntry:
        return self._taken(self._entries.get_nowait())

    def empty(self) -> bool:
        return self._entries.empty()

    def qsize(self) -> int:
        return self._entries.qsize()

    def queued_changes(self, ref: str) -> int:
        """How many queued entries write, delete or update `ref`."""
        return self._refs[ref]

    def _taken(self, entry: InboxEntry) -> InboxEntry:
        if (ref := touched_ref(entry.message)) is not None:
            self._refs[ref] -= 1
            if self._refs[ref] <= 0:
                del self._refs[ref]
        return entry
