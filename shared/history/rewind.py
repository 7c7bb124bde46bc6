"""Rewind: the rules the runtime (live) and the proxy (dormant) share (docs/architecture.md
"Snapshots, rewind and fork").

A rewind to entry X: (1) the disk as it is now is recorded (a snapshot keyed to the old leaf, so the
abandoned branch can be switched back to); (2) the snapshot that holds the state at X is found (409
naming the oldest point still kept when retention dropped it); (3) an intent is written
(`.snapshots/rewind.json`: the record to restore and the transcript entries to append); (4) the
workspace, documents and todo are restored; (5) the leaf moves are appended; (6) the intent goes.
A crash anywhere in (4)-(6) is finished by `finish_pending`, at the next wake or dormant write: the
restore is idempotent and an entry already in the transcript is not appended twice.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter

from shared.contracts.records.messages import AssistantMessage, TextContent, ToolCall, ToolResultMessage
from shared.contracts.records.transcript import LeafEntry, MessageEntry, TranscriptEntry, parse_entries
from shared.history.transcript_tree import active_path, path_to
from shared.storage.disk import (
    SessionPaths,
    append_jsonl,
    atomic_write_json,
    iter_jsonl,
    read_json,
    remove_durably,
)
from shared.storage.snapshot_restore import MissingObject, restore
from shared.storage.snapshots import Record, ScanTooLarge, SnapshotLimits, SnapshotStore
from shared.trust.trusted_blocks import render

RewindReason = Literal["rewind", "edit", "switch"]
SCOPES = ("workspace/", "documents/", "todo.json")  # a rewind leaves the UI state to the clients
FORK_SCOPES = ("workspace/", "documents/", "todo.json", "state.json")
NOTE = render("session_rewound", None, (
    "The user rewound the session to this point. Everything after it on the previous branch is abandoned: the "
    "workspace files, documents and task list are back to their state here. Effects outside the workspace "
    "(messages sent, remote changes) were not undone."))
NOT_RUN = "Not run: the user rewound the session to a point before this call ran."
_ENTRIES: TypeAdapter[list[TranscriptEntry]] = TypeAdapter(list[TranscriptEntry])


class RewindRefused(Exception):
    def __init__(self, status: int, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


class Intent(BaseModel):
    record: int
    target_id: str
    entries: list[dict[str, Any]]  # the transcript entries to append, in order, as JSON

    def parsed(self) -> list[TranscriptEntry]:
        return _ENTRIES.validate_python(self.entries)


def intent_path(paths: SessionPaths) -> Any:
    return paths.root / ".snapshots" / "rewind.json"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch_ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def state_record(store: SnapshotStore, branch: Sequence[TranscriptEntry],
                 sent_in: Sequence[TranscriptEntry] = ()) -> Record:
    """The snapshot holding the state at the branch's last entry, or RewindRefused(409). `sent_in`: for
    an edit, the branch to the edited user message, whose "prompt" snapshot holds the state it was sent
    in: the state at its parent when nothing older is kept (the first message's parent, the session's
    start, precedes every snapshot)."""
    return state_record_of(store, _nodes(branch), _nodes(sent_in) if sent_in else None)


def state_record_of(store: SnapshotStore, nodes: Sequence[tuple[str, int]],
                    sent_in: Sequence[tuple[str, int]] | None = None) -> Record:
    """`state_record` from the branches' nodes, (id, epoch ms) each (a live rewind reads only these of
    a long transcript: shared/history/transcript_branch.py)."""
    record = store.record_for(list(nodes))
    if record is None and sent_in:
        record = store.record_for(list(sent_in))
    if record is None:
        oldest = store.oldest_entry()
        where = f"the oldest point kept is entry {oldest}" if oldest else "this session has no snapshots yet"
        raise RewindRefused(409, f"no workspace snapshot is kept for that entry ({where}; "
                                 "snapshot retention: docs/architecture.md)", {"oldest_entry_id": oldest})
    if record.unrecorded is not None:
        raise RewindRefused(409, f"the workspace at that entry was not recorded: {record.unrecorded}; "
                                 f"a snapshot records at most {store.limits.max_entries} entries and "
                                 f"{store.limits.max_depth} levels", {"bound": store.limits.max_entries})
    return record


def _nodes(branch: Sequence[TranscriptEntry]) -> list[tuple[str, int]]:
    return [(e.id, epoch_ms(e.timestamp)) for e in branch if not isinstance(e, LeafEntry)]


def record_now(store: SnapshotStore, entry: str | None, reason: str) -> None:
    """Record the disk before a rewind or a fork of the leaf; RewindRefused(409) when it is past the
    snapshot bound: the disk's state is then unknown, and a restore from the last record would report
    files back that are not."""
    try:
        store.take(entry, reason)
    except ScanTooLarge as exc:
        raise too_large(store.limits, exc) from exc


def too_large(limits: SnapshotLimits, exc: ScanTooLarge) -> RewindRefused:
    return RewindRefused(409, f"the workspace cannot be recorded now: {exc}; a snapshot records at most "
                              f"{limits.max_entries} entries and {limits.max_depth} levels: remove files first",
                         {"bound": limits.max_entries})


def unanswered_calls(branch: Sequence[TranscriptEntry]) -> list[ToolCall]:
    """The calls of the branch's last tool batch that have no result on it: all of an assistant message
    that ends the branch, or, for a branch ending at one result of a parallel batch, the batch's others.
    The real APIs refuse a history holding a call without its output (docs/architecture.md "Snapshots,
    rewind and fork"), so a rewind never leaves one."""
    answered: set[str] = set()
    for entry in reversed(branch):
        if not isinstance(entry, MessageEntry):
            continue  # a trusted note, a skill or model change recorded between the results
        message = entry.message
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
            continue
        if isinstance(message, AssistantMessage):
            return [c for c in message.tool_calls() if c.id not in answered]
        return []
    return []


def leaf_moves(branch: Sequence[TranscriptEntry], from_id: str | None, reason: RewindReason,
               new_id: Callable[[], str], stamp: str) -> list[TranscriptEntry]:
    """The entries a rewind to the branch's last entry appends: the leaf move with its note. When calls
    of the last tool batch are left without a result (the target is the assistant message that made
    them, or one result of a parallel batch), each first gets a result saying it was not run (every
    call keeps a result, and the note never falls between a call and its results)."""
    target = branch[-1]
    calls = unanswered_calls(branch)
    if not calls:
        return [LeafEntry(id=new_id(), timestamp=stamp, target_id=target.id, from_id=from_id, reason=reason,
                          note=NOTE)]
    out: list[TranscriptEntry] = [LeafEntry(id=new_id(), timestamp=stamp, target_id=target.id, from_id=from_id,
                                            reason=reason)]
    parent = target.id
    for call in calls:
        result = MessageEntry(id=new_id(), parent_id=parent, timestamp=stamp, message=ToolResultMessage(
            tool_call_id=call.id, tool_name=call.name, is_error=True, content=[TextContent(text=NOT_RUN)]))
        out.append(result)
        parent = result.id
    out.append(LeafEntry(id=new_id(), timestamp=stamp, target_id=parent, from_id=from_id, reason=reason, note=NOTE))
    return out


def begin(paths: SessionPaths, record: Record, target_id: str, entries: list[TranscriptEntry]) -> Intent:
    intent = Intent(record=record.n, target_id=target_id,
                    entries=[e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in entries])
    atomic_write_json(intent_path(paths), intent)
    return intent


def pending(paths: SessionPaths) -> Intent | None:
    raw = read_json(intent_path(paths))
    if raw is None:
        return None
    try:
        return Intent.model_validate(raw)
    except ValueError:
        remove_durably(intent_path(paths))  # unreadable: written torn is impossible (atomic), so foreign
        return None


def restore_files(store: SnapshotStore, intent: Intent) -> int:
    """Step (4): the disk back to the intent's record. `store.current` must be the disk's state (the
    caller just took a snapshot); the restored state is recorded without reading the disk again."""
    try:
        restored = restore(store.paths.root, store.objects, store.current, store.manifest_of(intent.record), SCOPES)
    except MissingObject as exc:  # pruned (or lost) since the record was chosen: nothing left to restore from
        done(store.paths)
        raise RewindRefused(409, f"{exc}; retry the rewind") from exc
    store.adopt(restored.manifest, intent_leaf(intent), "rewind")  # keyed to the new leaf
    return restored.changed


def intent_leaf(intent: Intent) -> str:
    """The leaf once the intent's entries are appended."""
    last = intent.parsed()[-1]
    return last.target_id if isinstance(last, LeafEntry) else last.id


def done(paths: SessionPaths) -> None:
    with contextlib.suppress(FileNotFoundError):
        remove_durably(intent_path(paths))


# ---------------------------------------------------------------- on a dormant session's disk


def read_transcript(paths: SessionPaths) -> list[TranscriptEntry]:
    return parse_entries(list(iter_jsonl(paths.transcript)))


def finish_on_disk(store: SnapshotStore, intent: Intent) -> int:
    """Steps (4)-(6) without a runtime: the proxy, under the dormant-write lock."""
    changed = restore_files(store, intent)
    have = {e.id for e in read_transcript(store.paths)}
    append_jsonl(store.paths.transcript, [e for e in intent.entries if e.get("id") not in have])
    done(store.paths)
    return changed


def finish_pending_on_disk(paths: SessionPaths, limits: SnapshotLimits) -> None:
    intent = pending(paths)
    if intent is not None:
        store = SnapshotStore.load(paths, limits)
        store.take(None, "resumed")  # the disk as the crash left it
        finish_on_disk(store, intent)


def snapshot_on_disk(paths: SessionPaths, limits: SnapshotLimits, reason: str) -> None:
    """A dormant write's snapshot (an upload, a document edit), keyed to the transcript's leaf."""
    store = SnapshotStore.load(paths, limits)
    try:
        store.take(_leaf_of(active_path(read_transcript(paths))), reason)
    except ScanTooLarge:
        return  # past what a snapshot records: that point cannot be rewound to
    store.prune()


def rewind_on_disk(paths: SessionPaths, limits: SnapshotLimits, target_id: str, reason: RewindReason,
                   stamp: str, edited_id: str | None = None) -> dict[str, Any]:
    """A dormant session's rewind (blocking: the proxy runs it in a thread under the dormant-write
    lock). The same steps as the runtime's, on the disk the runtime reads at its next wake."""
    finish_pending_on_disk(paths, limits)
    entries = read_transcript(paths)
    branch = path_to(entries, target_id)
    if not branch:
        raise RewindRefused(404, f"no entry {target_id!r} in this session's transcript")
    active = active_path(entries)
    from_id = _leaf_of(active)
    store = SnapshotStore.load(paths, limits)
    record_now(store, from_id, "rewind_from")
    record = state_record(store, branch, path_to(entries, edited_id) if edited_id else ())
    ids = {e.id for e in entries}

    def new_id() -> str:
        while (candidate := secrets.token_hex(4)) in ids:
            pass
        ids.add(candidate)
        return candidate

    moves = leaf_moves(branch, from_id, reason, new_id, stamp)
    changed = finish_on_disk(store, begin(paths, record, target_id, moves))
    leaf = _leaf_of(moves)
    return {"entry_id": target_id, "leaf_id": leaf, "from_id": from_id, "changed": changed, "aborted_run_id": None}


def _leaf_of(entries: Sequence[TranscriptEntry]) -> str | None:
    if not entries:
        return None
    last = entries[-1]
    return last.target_id if isinstance(last, LeafEntry) else last.id
