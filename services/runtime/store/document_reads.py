"""The revision of each Gamma document the agent last read, which its next write of that document
must still find stored (docs/architecture.md "Delivery, yield and the idle rules").

What counts as reading revision N of `gamma:file:{doc}`: a `show_gamma` result carrying the deck
(only `doc`: the content and its revision) and the agent's own `show_gamma` write (it sent the whole
deck, so it knows revision N). A digest does not count, even an inline one: a write replaces the whole
deck, and the harness cannot check that the agent applied the digest to its copy; a refused write
costs one read. Derived from the transcript (a wake or a compaction keeps it), and updated as soon as
a tool result is made, so a read and a write in consecutive calls of one run agree before the
results are recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from shared.contracts.records.messages import ToolResultMessage
from shared.contracts.records.transcript import MessageEntry, TranscriptEntry

TOOL = "show_gamma"


def reads_in(entries: Sequence[TranscriptEntry]) -> dict[str, int]:
    """ari -> the revision the agent last read or wrote, from the recorded show_gamma results."""
    out: dict[str, int] = {}
    for e in entries:
        m = e.message if isinstance(e, MessageEntry) else None
        if not isinstance(m, ToolResultMessage) or m.tool_name != TOOL or m.is_error:
            continue
        details = m.details or {}
        ari, revision = details.get("ari"), details.get("revision")
        if isinstance(ari, str) and isinstance(revision, int) and not isinstance(revision, bool):
            out[ari] = revision
    return out


class DocumentReads:
    """The agent's read revisions for one session: built from the transcript on first use."""

    def __init__(self, entries: Callable[[], Sequence[TranscriptEntry]]) -> None:
        self._entries = entries
        self._reads: dict[str, int] | None = None

    def _all(self) -> dict[str, int]:
        if self._reads is None:
            self._reads = reads_in(self._entries())
        return self._reads

    def revision(self, ari: str) -> int | None:
        return self._all().get(ari)

    def saw(self, ari: str, revision: int) -> None:
        self._all()[ari] = revision


def stale_write(ari: str, doc: str, stored: int, read: int | None) -> str | None:
    """The refusal an agent write of `doc` gets when the stored revision is not the one it last read
    (None: the write may go on)."""
    if read == stored:
        return None
    again = (f"Call show_gamma with only doc={doc!r} to read the current deck, apply your change to that "
             "version (keep the other changes), then send the whole deck again.")
    if read is None:
        return (f"Not written: {ari} exists (revision {stored}) and you have not read it in this session, so "
                f"your deck could erase changes you have not seen. {again}")
    return (f"Not written: {ari} is at revision {stored}, but the last revision you read is {read}: it was changed "
            f"since (for example by the user in the editor), and your deck would erase that change. {again}")
