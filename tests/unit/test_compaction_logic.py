"""The pure compaction rules the runtime and the compaction service share (services/runtime/runs/compaction_trigger.py, shared/history/context.py, shared/history/summary_rules.py, shared/history/tokens.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.runtime.runs import compaction_trigger as c
from shared.contracts.records.messages import (
    AssistantMessage,
    CustomMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.contracts.records.transcript import (
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
    SessionHeader,
    SkillActivationEntry,
    TranscriptEntry,
)
from shared.contracts.streams.inbox import CompactionReady
from shared.history import context, tokens
from shared.history import summary_rules as rules

_ids = itertools.count(1)
TS = "2026-01-01T00:00:00Z"


def _id() -> str:
    return f"e{next(_ids):04d}"


def user(text: str) -> MessageEntry:
    return MessageEntry(id=_id(), timestamp=TS, message=UserMessage(content=text))


def assistant(text: str = "", calls: list[tuple[str, dict[str, Any]]] | None = None) -> MessageEntry:
    content: list[Any] = [TextContent(text=text)] if text else []
    content += [ToolCall(id=f"call{next(_ids)}", name=n, arguments=a) for n, a in calls or []]
    return MessageEntry(
        id=_id(), timestamp=TS,
        message=AssistantMessage(content=content, stop_reason="toolUse" if calls else "stop"),
    )


def result(text: str, name: str = "read", call_id: str = "x") -> MessageEntry:
    return MessageEntry(
        id=_id(), timestamp=TS,
        message=ToolResultMessage(tool_call_id=call_id, tool_name=name, content=[TextContent(text=text)]),
    )


def custom(kind: str, text: str) -> CustomMessageEntry:
    return CustomMessageEntry(id=_id(), timestamp=TS, custom_type=f"gamma.{kind}", content=text)


def compaction(summary: str, first_kept: str, **details: list[str]) -> CompactionEntry:
    return CompactionEntry(
        id=_id(), timestamp=TS, summary=summary, first_kept_entry_id=first_kept, details=dict(details),
        request_id="cr_" + _id(),
    )


def turn(words: int, tag: str) -> list[TranscriptEntry]:
    """A user request, a tool call with a large result, a final answer."""
    body = " ".join(f"{tag}{i}" for i in range(words))
    return [
        user(f"please work on {tag}"),
        assistant("looking", [("read", {"path": f"{tag}.md"})]),
        result(body),
        assistant(f"done with {tag}"),
    ]


def session(turns: int = 6, words: int = 400) -> list[TranscriptEntry]:
    entries: list[TranscriptEntry] = [SessionHeader(id=_id(), timestamp=TS)]
    for t in range(turns):
        entries += turn(words, f"t{t}")
    return entries


# ---------------------------------------------------------------- tokens and triggers


def test_estimate_counts_text_tool_calls_and_overhead() -> None:
    small = tokens.estimate_tokens(UserMessage(content="hello"))
    large = tokens.estimate_tokens(UserMessage(content="hello " * 500))
    assert small >= tokens.MESSAGE_OVERHEAD_TOKENS + 1
    assert 400 < large < 700
    call = AssistantMessage(content=[ToolCall(id="1", name="write", arguments={"path": "a.md", "content": "x " * 300})])
    assert tokens.estimate_tokens(call) > 250
    # details never reach the model: they do not count
    with_details = CustomMessage(custom_type="gamma.x", content="hi", details={"big": "y" * 10_000})
    assert tokens.estimate_tokens(with_details) == tokens.estimate_tokens(CustomMessage(custom_type="gamma.x", content="hi"))


def test_context_tokens_is_the_sum() -> None:
    msgs = [UserMessage(content="a b c"), UserMessage(content="d e f g")]
    assert tokens.context_tokens(msgs) == sum(tokens.estimate_tokens(m) for m in msgs)


def test_should_compact_threshold_is_strict() -> None:
    assert not c.should_compact(100, 200, 100)
    assert c.should_compact(101, 200, 100)
    assert c.should_compact(128_000 - 16_384 + 1, 128_000, 16_384)


@pytest.mark.parametrize(
    "error",
    [
        "Error code: 400 - context_length_exceeded",
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
        "Your input exceeds the context window of this model.",
        "prompt is too long: 210000 tokens > 200000 maximum",
    ],
)
def test_overflow_errors_are_recognized(error: str) -> None:
    assert c.is_context_overflow(AssistantMessage(stop_reason="error", error_message=error))


def test_other_errors_and_normal_stops_are_not_overflow() -> None:
    assert not c.is_context_overflow(AssistantMessage(stop_reason="error", error_message="rate limit reached"))
    assert not c.is_context_overflow(AssistantMessage(stop_reason="error"))
    assert not c.is_context_overflow(AssistantMessage(stop_reason="stop", error_message="context_length_exceeded"))


# ---------------------------------------------------------------- cut point


def test_cut_keeps_about_the_recent_budget_and_never_lands_on_a_tool_result() -> None:
    entries = session(turns=6, words=400)
    per_turn = tokens.context_tokens(m for e in entries[1:5] if (m := context.entry_message(e)))
    cut = c.find_cut(entries, keep_recent_tokens=per_turn * 2)
    assert cut is not None
    kept = entries[cut.first_kept_index :]
    kept_tokens = tokens.context_tokens(m for e in kept if (m := context.entry_message(e)))
    assert per_turn * 2 <= kept_tokens + per_turn  # within one turn of the budget
    for budget in range(50, per_turn * 6, 97):
        found = c.find_cut(entries, budget)
        if found is not None:
            entry = entries[found.first_kept_index]
            assert isinstance(entry, MessageEntry | CustomMessageEntry)
            assert not (isinstance(entry, MessageEntry) and entry.message.role == "toolResult")


def test_nothing_worth_compacting_gives_none() -> None:
    entries = session(turns=2, words=50)
    assert c.find_cut_point(entries, keep_recent_tokens=1_000_000) is None
    assert c.make_request("s1", entries, keep_recent_tokens=1_000_000) is None
    assert c.find_cut_point([SessionHeader(id="h", timestamp=TS)], 10) is None


def test_cut_inside_a_turn_is_a_split_turn() -> None:
    entries: list[TranscriptEntry] = [SessionHeader(id=_id(), timestamp=TS), *turn(300, "a")]
    long_turn = [user("build the deck")]
    for i in range(6):
        long_turn += [assistant(f"step {i}", [("read", {"path": f"s{i}.md"})]), result("w " * 300)]
    entries += long_turn
    cut = c.find_cut(entries, keep_recent_tokens=700)
    assert cut is not None and cut.is_split_turn
    assert entries[cut.turn_start_index] is long_turn[0]
    span = rules.summary_span(entries, cut.first_kept_entry_id, entries[-1].id)
    assert span.turn_prefix[0] is long_turn[0]
    assert all(e in entries[: cut.turn_start_index] for e in span.history)


def test_non_message_entries_stay_with_what_follows_them() -> None:
    entries: list[TranscriptEntry] = [SessionHeader(id=_id(), timestamp=TS), *turn(400, "a")]
    activation = SkillActivationEntry(id=_id(), timestamp=TS, name="deck-generation", skill_type="workflow")
    tail = [user("next"), assistant("ok")]
    entries += [activation, *tail]
    cut = c.find_cut(entries, keep_recent_tokens=10)
    assert cut is not None and cut.first_kept_entry_id == activation.id


def test_only_entries_after_the_latest_compaction_are_candidates_and_anchors_never() -> None:
    first = session(turns=4, words=300)
    comp = compaction("## Goal\nold", first[9].id)
    anchors = [custom("todo_anchor", "<todo>...</todo>"), custom("active_skill", "skill body " * 200)]
    entries = [*first, comp, *anchors, *turn(300, "n1"), *turn(300, "n2")]
    for budget in (1, 200, 400, 5000):
        cut = c.find_cut(entries, budget)
        if cut is None:
            continue
        assert cut.first_kept_index > entries.index(comp)
        assert entries[cut.first_kept_index] not in anchors


def test_context_after_a_compaction_is_summary_kept_then_rest() -> None:
    first = session(turns=4, words=100)
    comp = compaction("## Goal\nsummary", first[9].id)
    old_anchor = custom("todo_anchor", "old")
    new_anchor = custom("todo_anchor", "new")
    entries = [*first[:9], old_anchor, *first[9:], comp, new_anchor, user("go on")]
    ctx = context.context_entries(entries)
    assert ctx[0] is comp
    assert ctx[1] is first[9]
    assert old_anchor not in ctx and new_anchor in ctx
    assert ctx[-1] is entries[-1]


# ---------------------------------------------------------------- request


def test_make_request_first_compaction() -> None:
    entries = session(turns=6, words=400)
    req = c.make_request("sess1", entries, keep_recent_tokens=800, custom_instructions="focus on decks", model="m")
    assert req is not None
    assert req.upto_entry_id == entries[-1].id
    assert req.first_kept_entry_id == c.find_cut_point(entries, 800)
    assert req.previous_summary is None and req.previous_details is None
    assert req.tokens_before == tokens.context_tokens(context.build_context(entries))
    assert req.custom_instructions == "focus on decks" and req.model == "m"


def test_make_request_carries_the_previous_summary_and_details() -> None:
    first = session(turns=3, words=300)
    comp = compaction("## Goal\nearlier", first[5].id, readFiles=["a.md"], modifiedFiles=["b.md"])
    entries = [*first, comp, *turn(400, "x"), *turn(400, "y"), *turn(400, "z")]
    req = c.make_request("sess1", entries, keep_recent_tokens=500)
    assert req is not None
    assert req.previous_summary == "## Goal\nearlier"
    assert req.previous_details == {"readFiles": ["a.md"], "modifiedFiles": ["b.md"]}
    span = rules.summary_span(entries, req.first_kept_entry_id, req.upto_entry_id)
    assert span.previous is comp
    # the previous compaction's kept entries are summarized now, its summary entry is not
    assert span.history[0] is first[5]
    assert comp not in span.history


# ---------------------------------------------------------------- result


def _ready(entries: list[TranscriptEntry], **kw: Any) -> CompactionReady:
    req = c.make_request("s1", entries, keep_recent_tokens=300)
    assert req is not None
    base = dict(session_id="s1", request_id=req.request_id, summary="## Goal\nx",
                first_kept_entry_id=req.first_kept_entry_id, upto_entry_id=req.upto_entry_id)
    base.update(kw)
    return CompactionReady(**base)


def test_check_ready_apply_duplicate_stale() -> None:
    entries = session(turns=5, words=300)
    ready = _ready(entries)
    assert c.check_ready(ready, entries) == "apply"
    # entries appended after the request do not make it stale
    later = [*entries, user("more"), assistant("ok")]
    assert c.check_ready(ready, later) == "apply"
    applied = CompactionEntry(id=_id(), timestamp=TS, summary=ready.summary,
                              first_kept_entry_id=ready.first_kept_entry_id, request_id=ready.request_id)
    assert c.check_ready(ready, [*later, applied]) == "duplicate"
    other = compaction("## Goal\nother", ready.first_kept_entry_id)
    assert c.check_ready(ready, [*later, other]) == "stale"
    assert c.check_ready(_ready(entries, error="model down"), entries) == "stale"
    assert c.check_ready(_ready(entries, first_kept_entry_id="gone"), entries) == "stale"
    assert c.check_ready(_ready(entries, upto_entry_id="gone"), entries) == "stale"


# ---------------------------------------------------------------- files


def test_file_operations_merge_previous_details() -> None:
    entries = [
        assistant("", [("read", {"path": "brief.xml"}), ("read", {"path": "notes.md"})]),
        result("..."),
        assistant("", [("edit", {"path": "notes.md", "old": "a", "new": "b"}), ("write", {"path": "deck.json"})]),
        assistant("", [("bash", {"command": "ls"}), ("show_file", {"path": "deck.json"})]),
    ]
    ops = rules.file_operations(entries, {"readFiles": ["old.md", "deck.json"], "modifiedFiles": ["gone.md"]})
    assert ops == {"readFiles": ["brief.xml", "old.md"], "modifiedFiles": ["deck.json", "gone.md", "notes.md"]}
    text = rules.format_file_operations(ops)
    assert "<read-files>\nbrief.xml\nold.md\n</read-files>" in text
    assert "<modified-files>\ndeck.json\ngone.md\nnotes.md\n</modified-files>" in text
    assert rules.format_file_operations({"readFiles": [], "modifiedFiles": []}) == ""
    # without explicit details, the latest compaction entry's are merged
    earlier = compaction("## Goal\n- x", "e0001", readFiles=["old.md"], modifiedFiles=["gone.md"])
    assert rules.file_operations([earlier, *entries])["modifiedFiles"] == ["deck.json", "gone.md", "notes.md"]


# ---------------------------------------------------------------- properties


_step = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 400)),
    st.tuples(st.just("tools"), st.integers(1, 3), st.integers(1, 600)),
    st.tuples(st.just("say"), st.integers(1, 300)),
    st.tuples(st.just("inject"), st.integers(1, 100)),
)


def _build(steps: list[tuple[Any, ...]], compact_at: int | None) -> list[TranscriptEntry]:
    entries: list[TranscriptEntry] = [SessionHeader(id=_id(), timestamp=TS), user("start")]
    for n, step in enumerate(steps):
        if step[0] == "user":
            entries.append(user("u " * step[1]))
        elif step[0] == "tools":
            msg = assistant("", [("read", {"path": f"f{i}.md"}) for i in range(step[1])])
            entries.append(msg)
            assert isinstance(msg.message, AssistantMessage)
            entries += [result("r " * step[2], call_id=call.id) for call in msg.message.tool_calls()]
        elif step[0] == "say":
            entries.append(assistant("a " * step[1]))
        else:
            entries.append(custom("system_update", "<system_update>" + "x " * step[1] + "</system_update>"))
        if compact_at == n:
            cut = c.find_cut(entries, 300)
            if cut is not None:
                entries.append(compaction("## Goal\n- earlier", cut.first_kept_entry_id))
                entries.append(custom("todo_anchor", "<todo_state/>"))
    return entries


@settings(max_examples=150, deadline=None)
@given(st.lists(_step, min_size=1, max_size=25), st.integers(0, 3000), st.one_of(st.none(), st.integers(0, 24)))
def test_cut_invariants(steps: list[tuple[Any, ...]], keep: int, compact_at: int | None) -> None:
    entries = _build(steps, compact_at)
    cut = c.find_cut(entries, keep)
    if cut is None:
        return
    last = context.latest_compaction_index(entries)
    kept_entry = entries[cut.first_kept_index]
    assert cut.first_kept_index > last
    assert isinstance(kept_entry, MessageEntry | CustomMessageEntry) and not context.is_anchor(kept_entry)
    assert not (isinstance(kept_entry, MessageEntry) and kept_entry.message.role == "toolResult")
    # after applying it, every tool result in context still follows the call that asked for it
    applied = [*entries, compaction("## Goal\n- now", cut.first_kept_entry_id)]
    seen_calls: set[str] = set()
    for m in context.build_context(applied):
        if isinstance(m, AssistantMessage):
            seen_calls.update(call.id for call in m.tool_calls())
        elif isinstance(m, ToolResultMessage):
            assert m.tool_call_id in seen_calls
    # and the context shrinks
    assert tokens.context_tokens(context.build_context(applied)) < tokens.context_tokens(context.build_context(entries)) + 40
    span = rules.summary_span(entries, cut.first_kept_entry_id, entries[-1].id)
    assert span.history or span.turn_prefix
