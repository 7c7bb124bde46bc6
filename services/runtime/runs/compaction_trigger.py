"""When and where the runtime compacts: pure functions, no I/O (Pi's compaction.ts, in Python).

The runtime decides *when* to compact (`should_compact`, `is_context_overflow`), builds the request
(`make_request`) and vets the answer (`check_ready`). What the model sees and what a compaction
summarizes are rules shared with the compaction service (`shared.history.context`, `shared.history.summary_rules`,
`shared.history.tokens`), so both agree on the cut without a second copy of the rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from shared.contracts.records.messages import AssistantMessage
from shared.contracts.records.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
    TranscriptEntry,
)
from shared.contracts.streams.compaction import CompactionRequest
from shared.contracts.streams.inbox import CompactionReady
from shared.history.context import (
    build_context,
    entry_message,
    index_of,
    is_anchor,
    kept_start_index,
    latest_compaction_index,
)
from shared.history.summary_rules import summarizable, turn_start_before
from shared.history.tokens import Count, context_tokens, count_text_tokens, estimate_tokens
from shared.media.image_tokens import Detail

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


def should_compact(context_tokens: int, context_window: int, reserve_tokens: int) -> bool:
    """Pi's threshold: compact once the context leaves less than `reserve_tokens` of the window."""
    return context_tokens > context_window - reserve_tokens


def is_context_overflow(message: AssistantMessage) -> bool:
    """The provider refused the request because the prompt does not fit the model's window."""
    if message.stop_reason != "error" or not message.error_message:
        return False
    return any(p.search(message.error_message) for p in OVERFLOW_PATTERNS)


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


def find_cut(entries: Sequence[TranscriptEntry], keep_recent_tokens: int, model: str = "",
             detail: Detail = "auto", count: Count = count_text_tokens) -> CutPoint | None:
    """Walk back from the newest entry until `keep_recent_tokens` are kept; cut at a valid entry.

    Only entries after the latest compaction are candidates. None when the cut would remove nothing
    from the model context (everything fits in the recent budget). Images count by the formula of
    `model` at `detail`, as the threshold counts them (shared/media/image_tokens.py).
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
        if not summarizable(entry):
            continue
        message = entry_message(entry)
        assert message is not None
        accumulated += estimate_tokens(message, model, detail, count)
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
    removed = [e for e in entries[start:cut] if summarizable(e)]
    if last >= 0:
        removed += [e for e in entries[kept_start_index(entries, last) : last] if summarizable(e)]
    if not removed:
        return None
    turn_start = turn_start_before(entries, cut, start)
    return CutPoint(cut, entries[cut].id, turn_start, turn_start >= 0)


def find_cut_point(entries: Sequence[TranscriptEntry], keep_recent_tokens: int, model: str = "",
                   detail: Detail = "auto") -> str | None:
    cut = find_cut(entries, keep_recent_tokens, model, detail)
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
    detail: Detail = "auto",
    count: Count = count_text_tokens,
) -> CompactionRequest | None:
    """The request for compacting everything up to the last entry; None if nothing would be removed.

    `tokens_before` defaults to the estimate of the current model context (summary, kept, rest);
    images count by `model`'s formula at `detail`; texts by `count` (the session's `TextTokens`).
    """
    cut = find_cut(entries, keep_recent_tokens, model or "", detail, count)
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
        tokens_before=(tokens_before if tokens_before is not None
                       else context_tokens(build_context(entries), model or "", detail, count)),
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
    upto = index_of(entries, ready.upto_entry_id)
    kept = index_of(entries, ready.first_kept_entry_id)
    if upto < 0 or kept < 0 or kept > upto:
        return "stale"
    if latest_compaction_index(entries) > latest_compaction_index(entries, before=kept):
        return "stale"  # a compaction after the cut: this summary no longer starts where context does
    return "apply"


