"""The transcript index: what a wake needs of a long transcript, kept beside it (docs/architecture.md
"How a session wakes").

`.transcript.index.json` holds, as of the first `length` bytes of `transcript.jsonl`: the spans of the
active branch from the latest compaction's first kept entry to the leaf (the window: everything the
model's context is built from), the skills live at the window's start and the idempotency facts of
every branch: the revisions the agent was told, and the prompt ids, injection sources and compaction
request ids after `ids_length` (those before: the ids file, shared/history/transcript_ids.py). A wake reads the
index, the window's lines and the lines after `length`: never the rest of the file.

Crash rules. The index is written whole (temp file, fsync, rename: `atomic_write_bytes`), so a
reader sees an old index or a new one, never a torn one. It describes a prefix of an append-only
file, checked at every read: the file must be at least `length` long and its line at `last` must hash
to `last_hash`. A missing, unparsable, other-version or stale index (the transcript rewritten, cut, or
replaced), or one whose ids file is not valid (shared/history/transcript_ids.py `older_ids`), is rebuilt from
the transcript by one scan in slices (shared/history/transcript_scan.py). Lines appended after `length` (the
index is written at compactions and leaf moves, not at every append) are read and folded at the wake;
when they are not a plain continuation of the leaf (a leaf move a crash kept from its index write, a
second writer), the index is rebuilt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from shared.contracts.records.transcript import ENTRY_ADAPTER, TranscriptEntry
from shared.history import scan_apart
from shared.history import transcript_ids as tid
from shared.history.transcript_scan import Scan, Span, iter_lines, parse_line, read_spans, scan
from shared.history.window_rules import capped, keep_loads, live_skills, load_key, task_start, window_start
from shared.storage.disk import atomic_write_bytes
from shared.storage.file_seen import fold_seen, seen_change

VERSION = 2  # 1: every id in the index, no ids file (read as `ids_length` 0)


def index_path(transcript: Path) -> Path:
    return transcript.with_name(".transcript.index.json")


def line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


@dataclass
class Facts:
    """Idempotency facts of every branch (services/runtime/store/transcript.py reads them): one fold of the
    entries as JSON, for the live appends and for a rebuild alike; those before `ids_length`: the ids file."""

    prompts: dict[str, str] = field(default_factory=dict)  # prompt_id -> entry id
    sources: dict[tuple[str, str], str] = field(default_factory=dict)  # (source, source_id) -> entry id
    told: dict[str, tuple[int, str]] = field(default_factory=dict)  # ref -> (highest to_revision, entry id)
    compactions: set[str] = field(default_factory=set)  # request ids
    ids_length: int = 0

    def fold(self, d: dict[str, Any]) -> None:
        kind, eid = d.get("type"), d.get("id")
        if not isinstance(eid, str):
            return
        if kind == "message" and isinstance(d.get("promptId"), str):
            self.prompts[d["promptId"]] = eid
        elif kind == "custom_message" and isinstance(details := d.get("details"), dict):
            source, source_id = details.get("source"), details.get("sourceId")
            if isinstance(source, str) and isinstance(source_id, str):
                self.sources[(source, source_id)] = eid
            ref, to = details.get("ref"), details.get("toRevision")
            if (details.get("injectionType") == "artifact_update" and isinstance(ref, str)
                    and isinstance(to, int) and not isinstance(to, bool) and to > self.told.get(ref, (-1, ""))[0]):
                self.told[ref] = (to, eid)
        elif kind == "compaction" and isinstance(d.get("requestId"), str):
            self.compactions.add(d["requestId"])


Usage = dict[str, list[int]]  # model -> [requests, input, cached, written, output], in first-use order


def usage_of(d: dict[str, Any]) -> tuple[str, list[int]] | None:
    """An assistant message's model and token usage (services/runtime/ui/costs.py prices them)."""
    m = d.get("message")
    if d.get("type") != "message" or not isinstance(m, dict) or m.get("role") != "assistant":
        return None
    usage = m.get("usage")
    u: dict[str, Any] = usage if isinstance(usage, dict) else {}
    counts = [1, *(int(u.get(k) or 0) for k in ("input", "cacheRead", "cacheWrite", "output"))]
    return str(m.get("model") or "unknown"), counts


def add_usage(acc: Usage, model: str, counts: Sequence[int]) -> None:
    row = acc.setdefault(model, [0, 0, 0, 0, 0])
    for k, n in enumerate(counts):
        row[k] += n


class TranscriptIndex(BaseModel):
    version: Literal[1, 2] = 2  # VERSION: another version is rebuilt
    length: int = 0  # bytes of the transcript described (whole lines)
    last: Span | None = None  # the last line described, and its hash: the staleness check
    last_hash: str = ""
    window: list[Span] = []  # the active branch from the latest compaction's first kept entry to the leaf
    base_skills: list[dict[str, Any]] = []  # skill activations live at the window's start (entries as JSON)
    base_usage: Usage = {}  # the active branch's token usage before the window (cost records)
    base_loads: list[dict[str, Any]] = []  # loaded connectors/tools and knowledge before the window (`keep_loads`)
    base_seen: dict[str, str] = {}  # file -> the hash the agent saw, on the active branch before the window
    ids_length: int = 0  # the transcript bytes whose prompt ids, sources and compaction ids are in the ids file
    prompts: dict[str, str] = {}  # those folded after `ids_length`
    sources: list[tuple[str, str, str]] = []
    told: dict[str, tuple[int, str]] = {}
    compactions: list[str] = []

    def facts(self) -> Facts:
        return Facts(dict(self.prompts), {(s, i): e for s, i, e in self.sources}, dict(self.told),
                     set(self.compactions), self.ids_length)

    def recent(self) -> int:
        return len(self.prompts) + len(self.sources) + len(self.compactions)


def index_of(facts: Facts, **fields: Any) -> TranscriptIndex:
    return TranscriptIndex(prompts=facts.prompts, sources=[(s, i, e) for (s, i), e in facts.sources.items()],
                           told=facts.told, compactions=sorted(facts.compactions), **fields)


def write_index(transcript: Path, index: TranscriptIndex) -> None:
    atomic_write_bytes(index_path(transcript), index.model_dump_json().encode())


def save(transcript: Path, index: TranscriptIndex) -> TranscriptIndex:
    """Write the index (returned); its ids, once `RECENT_MAX` or more, first move to the ids file (written
    before the index that counts on it: a crash between keeps both valid)."""
    if index.recent() >= tid.RECENT_MAX and index.last is not None:
        tid.merge(transcript, tid.items(index), index.length, index.last, index.last_hash, index.ids_length > 0)
        index = index.model_copy(update={"prompts": {}, "sources": [], "compactions": [], "ids_length": index.length,
                                         "version": VERSION})
    write_index(transcript, index)
    return index


def read_index(transcript: Path) -> TranscriptIndex | None:
    """The index when it still describes the file; None when missing, corrupt or stale."""
    try:
        index = TranscriptIndex.model_validate_json(index_path(transcript).read_bytes())
    except (FileNotFoundError, ValidationError, ValueError):
        return None
    if index.length == 0:
        return index if index.last is None else None
    holds = index.last is not None and tid.describes(transcript, index.length, index.last, index.last_hash)
    return index if holds else None


# ---------------------------------------------------------------- rebuild


def rebuild(transcript: Path, persist: bool = True) -> TranscriptIndex:
    """The index from one scan of the whole transcript in slices; written atomically (`persist`: only
    the transcript's writer, the runtime, writes it), then returned."""
    facts = Facts()
    kinds: dict[int, dict[str, Any]] = {}  # compactions' cut points and skills' names, by row index

    def on_entry(i: int, d: dict[str, Any]) -> None:
        facts.fold(d)
        kind = d.get("type")
        if kind == "compaction":
            kinds[i] = {"type": kind, "firstKeptEntryId": d.get("firstKeptEntryId")}
        elif kind in ("skill_activation", "skill_end"):
            kinds[i] = {"type": kind, "name": d.get("name"), "skillType": d.get("skillType")}
        elif kind == "audit":
            kinds[i] = {"type": kind, "workflow": d.get("workflow"), "outcome": d.get("outcome")}
        elif (used := usage_of(d)) is not None:
            kinds[i] = {"type": "usage", "usage": used}
        elif load_key(d) is not None or (kind == "custom_message" and isinstance(d.get("details"), dict)
                                         and d["details"].get("injectionType") == "workspace_update"):
            kinds[i] = {"type": "load"}
        elif (change := seen_change(d)) is not None:
            kinds[i] = {"type": "seen", "seen": change}

    s = scan(transcript, on_entry)
    index = index_from_scan(transcript, s, kinds, facts)
    return save(transcript, index) if persist else index


def index_from_scan(transcript: Path, s: Scan, kinds: dict[int, dict[str, Any]], facts: Facts) -> TranscriptIndex:
    branch = s.path()
    start = window_start(kinds, s.rows, branch)
    marks = ((pos, kinds[i]) for pos, i in enumerate(branch[:start]) if i in kinds)
    start = capped([s.spans[i] for i in branch], task_start(marks, start), start)
    base = sorted(live_skills(kinds, branch[:start]).values())
    usage: Usage = {}
    for i in branch[:start]:
        if (d := kinds.get(i)) is not None and d["type"] == "usage":
            add_usage(usage, *d["usage"])
    seen: dict[str, str] = {}
    for i in branch[:start]:
        if (d := kinds.get(i)) is not None and d["type"] == "seen":
            fold_seen(seen, d["seen"])
    base_lines = read_spans(transcript, [s.spans[i] for i in base]) if base else []
    loads = [i for i in branch[:start] if (d := kinds.get(i)) is not None and d["type"] == "load"]
    load_lines = read_spans(transcript, [s.spans[i] for i in loads]) if loads else []
    last = s.spans[-1] if s.spans else None
    last_line = read_spans(transcript, [last])[0] if last is not None else b""
    return index_of(facts, length=s.length, last=last, last_hash=line_hash(last_line) if last else "",
                    window=[s.spans[i] for i in branch[start:]],
                    base_skills=[d for line in base_lines if (d := parse_line(line)) is not None], base_usage=usage,
                    base_loads=keep_loads((), (d for line in load_lines if (d := parse_line(line)) is not None)),
                    base_seen=seen)


# ---------------------------------------------------------------- the wake's read


@dataclass
class Loaded:
    """What a wake reads: the index, the window's entries with their spans, and the entries appended
    after the index (a plain continuation of the window's leaf), each as JSON and parsed."""

    index: TranscriptIndex
    window: list[tuple[Span, TranscriptEntry]]
    tail: list[tuple[Span, dict[str, Any], TranscriptEntry]]
    rebuilt: bool = False
    older: tid.IdFile | None = None  # the ids before the index's `ids_length`


def parse_entry(d: dict[str, Any]) -> TranscriptEntry | None:
    try:
        return ENTRY_ADAPTER.validate_python(d)
    except ValueError:
        return None


def _leaf_after(leaf: str | None, d: dict[str, Any]) -> tuple[bool, str | None]:
    """(still linear, the new leaf) after the entry `d` is appended under `leaf`."""
    if d.get("type") == "leaf":
        return False, leaf
    return d.get("parentId") == leaf or leaf is None, d.get("id")


def _read_window(transcript: Path, index: TranscriptIndex) -> list[tuple[Span, TranscriptEntry]]:
    out: list[tuple[Span, TranscriptEntry]] = []
    for span, line in zip(index.window, read_spans(transcript, index.window), strict=True):
        d = parse_line(line)
        if d is not None and (entry := parse_entry(d)) is not None:
            out.append((span, entry))
    return out


def _read_tail(transcript: Path, index: TranscriptIndex, leaf: str | None
               ) -> list[tuple[Span, dict[str, Any], TranscriptEntry]] | None:
    """The entries after the index, or None when they are not a plain continuation of `leaf`."""
    out: list[tuple[Span, dict[str, Any], TranscriptEntry]] = []
    for offset, line in iter_lines(transcript, index.length):
        d = parse_line(line)
        if d is None or (entry := parse_entry(d)) is None:
            continue
        linear, leaf = _leaf_after(leaf, d)
        if not linear:
            return None
        out.append(((offset, len(line)), d, entry))
    return out


def leaf_of(window: Sequence[tuple[Span, TranscriptEntry]]) -> str | None:
    if not window:
        return None
    last = window[-1][1]
    return getattr(last, "target_id", None) if last.type == "leaf" else last.id


def _rebuilt(transcript: Path) -> TranscriptIndex:
    """`rebuild`, in a child process for a long file (the GIL kept for the event loop: scan_apart.py);
    what it wrote is read back and checked against the file."""
    if scan_apart.in_child(scan_apart.INDEX_CHILD, transcript) is not None and (index := read_index(transcript)):
        return index
    return rebuild(transcript)


def load(transcript: Path, fresh: bool = False) -> Loaded:
    """The wake's read (blocking: the caller runs it in the I/O pool); `fresh`: rebuild the index first
    (after a leaf move, the branch changed)."""
    if not transcript.exists():  # a new session: nothing to read, no index written for it yet
        return Loaded(TranscriptIndex(), [], [])
    index, rebuilt = (None if fresh else read_index(transcript)), False
    older = tid.older_ids(transcript, index.ids_length) if index is not None else False
    if index is None or older is False:
        index, rebuilt = _rebuilt(transcript), True
    elif index.recent() >= tid.RECENT_MAX:  # an index written before the ids file: its ids move there once
        index = save(transcript, index)
    window = _read_window(transcript, index)
    tail = _read_tail(transcript, index, leaf_of(window))
    if tail is None:  # a branch the index does not know: the whole tree once more
        index, rebuilt = _rebuilt(transcript), True
        window, tail = _read_window(transcript, index), []
    older = tid.older_ids(transcript, index.ids_length) if rebuilt or older is None else older
    return Loaded(index, window, tail, rebuilt, older or None)


def window_lines(transcript: Path) -> list[dict[str, Any]]:
    """The window and the lines after the index, as JSON, for a reader that is not the transcript's
    writer (the proxy's dormant preview): the index when it is valid, else one scan; nothing written."""
    index = read_index(transcript)
    if index is None:
        if not transcript.exists():
            return []
        index = rebuild(transcript, persist=False)
    out = [d for line in read_spans(transcript, index.window) if (d := parse_line(line)) is not None]
    leaf = leaf_of([(s, e) for s, d in zip(index.window, out, strict=False) if (e := parse_entry(d)) is not None])
    tail = _read_tail(transcript, index, leaf)
    if tail is None:  # a branch the index does not know yet: the window from one scan
        index = rebuild(transcript, persist=False)
        return [d for line in read_spans(transcript, index.window) if (d := parse_line(line)) is not None]
    return out + [d for _, d, _ in tail]


def _child_rebuild(transcript: Path) -> None:
    from shared.history import transcript_index  # this module as imported, not as __main__  # noqa: PLW0406

    transcript_index.rebuild(transcript)


if __name__ == "__main__":  # scan_apart.py's child: the index written, nothing returned
    scan_apart.as_child(_child_rebuild)
