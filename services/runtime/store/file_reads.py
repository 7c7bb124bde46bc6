"""What the agent last saw of each workspace file, which its next `write` or `edit` of that file must
still find (prompts/interface.txt; docs/architecture.md "No unread overwrite of a user's file"): the
files' version of the deck guard (document_reads.py).

Seen: the SHA-256 of the content the agent last read (`read`), wrote (`write`, `edit`) or made with a
command (`bash`: each file it changed). Derived from those tool results' details (`sha256`; bash's
`files`), so a wake or a compaction keeps it, and updated as soon as a result is made, so a read and a
write in consecutive calls of one run agree before the results are recorded.

A write or an edit of a file that exists is refused when the agent never saw it, or when its content
is not the one seen: the user, a collaborator or a service changed it since. The refusal names the
change: a client's live save (the runtime applied it: writes.py), else the last artifact_update about
the file the agent was sent, else only that the content differs. A file that does not exist may be
written: there is nothing to overwrite.

`bash` is not checked before it runs (its commands are the agent's to choose); its result lists each
file it altered that someone else had changed since the agent saw it, or that the agent never saw
(`altered_by_others`). Those stay unseen (a write of them still needs a read), and so does a file a
client saved while the command ran: the command's change of it is not the agent's whole view of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from shared.contracts.records.messages import ToolResultMessage
from shared.contracts.records.transcript import CustomMessageEntry, MessageEntry, TranscriptEntry
from shared.storage import workspace_fs
from shared.storage.disk import DiskError, split_workspace_path

TOOLS = ("read", "write", "edit")
MAX_PRECHECK = 500  # files hashed before a bash call (the most recently seen): bounds the work per call


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical(rel: str) -> str | None:
    """The workspace path as one spelling (`./a//b` is `a/b`), or None when it names no file."""
    try:
        return "/".join(split_workspace_path(rel))
    except DiskError:
        return None


def current_sha(workspace: Path, rel: str) -> str | None:
    """The file's content hash now; None when there is no such file (or no file can be there)."""
    try:
        return sha256(workspace_fs.read_bytes(workspace, rel))
    except DiskError:
        return None


def seen_in(entries: Sequence[TranscriptEntry]) -> dict[str, str]:
    """path -> the hash the agent last saw, from the recorded read/write/edit/bash results."""
    out: dict[str, str] = {}
    for e in entries:
        m = e.message if isinstance(e, MessageEntry) else None
        if not isinstance(m, ToolResultMessage) or m.is_error and m.tool_name != "bash":
            continue
        details = m.details or {}
        if m.tool_name in TOOLS and isinstance(details.get("sha256"), str) and "skill" not in details:
            path = canonical(str(details.get("path", "")))
            if path is not None:
                out[path] = details["sha256"]
        elif m.tool_name == "bash" and isinstance(details.get("files"), dict):
            apply_bash(out, details["files"])
    return out


def apply_bash(seen: dict[str, str], files: Mapping[str, object]) -> None:
    for path, sha in files.items():
        if isinstance(sha, str):
            seen[path] = sha
        else:
            seen.pop(path, None)  # removed by the command


def last_update(entries: Sequence[TranscriptEntry], path: str) -> str | None:
    """The last artifact_update about `file:path` the agent was sent, in words."""
    ref = "file:" + path
    for e in reversed(entries):
        details = e.details if isinstance(e, CustomMessageEntry) and isinstance(e.details, dict) else {}
        if details.get("injectionType") == "artifact_update" and details.get("ref") == ref:
            who = "a service" if details.get("source") == "notification" else "the user or a collaborator"
            to = details.get("toRevision")
            return f"{who} changed it" + (f" (revision {to}, in an artifact_update you were sent)" if to else "")
    return None


class FileReads:
    """The agent's seen hashes for one session: built from the transcript on first use."""

    def __init__(self, entries: Callable[[], Sequence[TranscriptEntry]],
                 base: Callable[[], Mapping[str, str]] = dict) -> None:
        self._entries = entries
        self._base = base  # seen before the transcript's window (shared/storage/file_seen.py): a compaction keeps it
        self._seen: dict[str, str] | None = None
        self._saves: dict[str, tuple[int, int | None]] = {}  # path -> (order, revision) of a client's save since seen
        self._order = 0

    def _all(self) -> dict[str, str]:
        if self._seen is None:
            self._seen = {**self._base(), **seen_in(self._entries())}
        return self._seen

    def seen(self, path: str) -> str | None:
        return self._all().get(path)

    def saw(self, path: str, sha: str) -> None:
        seen = self._all()
        seen.pop(path, None)
        seen[path] = sha  # last seen last: the pre-check of a command hashes the most recent ones
        self._saves.pop(path, None)

    def mark(self) -> int:
        """Where the client saves stand now (before a command runs)."""
        return self._order

    def saved_since(self, mark: int) -> set[str]:
        return {p for p, (order, _) in self._saves.items() if order > mark}

    def bash_changed(self, files: Mapping[str, str | None], unseen: set[str]) -> None:
        """A command's changes, except `unseen` (changed by others: the agent did not see those)."""
        apply_bash(self._all(), {p: sha for p, sha in files.items() if p not in unseen})
        for path in set(files) - unseen:
            self._saves.pop(path, None)

    def client_saved(self, path: str, revision: int | None) -> None:
        """A client's live write of `path` was applied (writes.py)."""
        self._order += 1
        self._saves[path] = (self._order, revision)

    def recent(self) -> list[str]:
        return list(self._all())[-MAX_PRECHECK:]

    def change(self, path: str) -> str:
        if path in self._saves:
            revision = self._saves[path][1]
            return "the user or a collaborator saved it" + (f" (revision {revision})" if revision else "")
        return last_update(self._entries(), path) or "its content is not what you last read or wrote"

    def refusal(self, path: str, current: str | None) -> str | None:
        """The error a write or edit of `path` gets, whose content is `current` now (None: goes on)."""
        seen = self.seen(path)
        if current is None or current == seen:
            return None
        again = ("Read it with the read tool, apply your change to that version (keep the other changes), then "
                 "write or edit again.")
        if seen is None:
            return (f"Not written: {path} exists and you have not read it in this session, so your change could "
                    f"erase content you have not seen. {again}")
        return (f"Not written: {path} changed since you last read it: {self.change(path)}. Your change would "
                f"erase that change. {again}")


def stale(workspace: Path, reads: FileReads, paths: Iterable[str]) -> set[str]:
    """Of `paths` (seen files), those whose content now is not the one seen (before a command runs)."""
    out = set()
    for path in paths:
        now = current_sha(workspace, path)
        if now is not None and now != reads.seen(path):
            out.add(path)
    return out


def altered_by_others(changed: Iterable[str], existed: set[str], stale_before: set[str], reads: FileReads) -> list[str]:
    """The files a command altered that someone else had changed since the agent saw them (before it
    ran, or while it ran: `stale_before` holds both), or that existed and the agent never saw; each
    with its change, for the command's result."""
    out = []
    for path in sorted(changed):
        if path in stale_before:
            out.append(f"{path} ({reads.change(path)})")
        elif path in existed and reads.seen(path) is None:
            out.append(f"{path} (you had not read it)")
    return out
