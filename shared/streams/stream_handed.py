"""What the shared stream reader (shared/streams/stream_reader.py) handed out, per stream.

Without a group it is where each stream's next read starts. In a group it is what a read of the
consumer's own pending entries starts after: Redis moves what a `>` read returns into the consumer's
pending list as it sends the reply, so a reply lost on the way (a reset, a timeout, a restart) would
leave those entries pending and never read again. After a failed read the reader therefore asks for
its own pending entries above the last id handed out (`add` starts it at the last entry claimed at the
wake), hands them out, and only then reads `>` again; entries claimed from another consumer meanwhile
are not handed out a second time (docs/architecture.md "Redis failures").
"""

from __future__ import annotations

from shared.streams.stream_packing import id_key


class HandedOut:
    def __init__(self, grouped: bool) -> None:
        self.grouped = grouped
        self.last: dict[str, str] = {}  # name -> the id last handed out (in a group: or claimed)
        self._claimed: dict[str, set[str]] = {}  # in a group: ids above `last` handed out by a claim

    def start(self, name: str, from_id: str) -> None:
        if not self.grouped or name not in self.last:
            self.last[name] = from_id

    def forget(self, name: str) -> None:
        self.last.pop(name, None)
        self._claimed.pop(name, None)

    def after(self, name: str) -> str:
        return self.last.get(name, "0-0")

    def claimed(self, name: str, entry_ids: list[str]) -> None:
        """In a group: entries handed out another way (claimed from another consumer)."""
        if name in self.last:
            ids = self._claimed.get(name, set()) | set(entry_ids)
            self._claimed[name] = {e for e in ids if id_key(e) > id_key(self.last[name])}
            if not self._claimed[name]:
                del self._claimed[name]

    def take(self, name: str, eid: str) -> bool:
        """Whether a read's entry is handed out (no: its stream was removed without a group, or a
        claim handed it out already); moves the last id handed out up to it."""
        last = self.last.get(name)
        if last is None:
            return self.grouped  # in a group a removed session's entries stay pending for its next holder
        if not self.grouped or id_key(eid) > id_key(last):
            self.last[name] = eid
        claimed = self._claimed.get(name, set())
        if eid not in claimed:
            return True
        claimed.discard(eid)
        if not claimed:
            del self._claimed[name]
        return False
