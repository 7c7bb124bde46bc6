"""The compaction service's pieces: serialization, prompts, and the scripted summarizer behind the real
openai client (the same code path a real model would take)."""

from __future__ import annotations

import pytest

from scripted.factory import KnobbedTransport
from scripted.reading import parse_calls, parse_summary
from scripted.settings import ScriptedSettings
from scripted.summarizer import scripted_summarizer
from scripted.transport import scripted_client
from scripted.types import ScriptedReply
from services.compaction import prompts
from services.compaction.serialize import serialize_entries, serialize_message
from services.compaction.summarizer import Summarizer, SummaryError
from services.runtime.runs import compaction_trigger as c
from shared.contracts.records.messages import (
    AssistantMessage,
    CustomMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
)
from shared.history import summary_rules as rules
from tests.support.compaction_sessions import SessionBuilder, deck_session, todo_items


def summarizer(**knobs: float) -> Summarizer:
    knobs_ = ScriptedSettings(**{f"compaction_{k}": v for k, v in knobs.items()})
    return Summarizer(scripted_client(KnobbedTransport(knobs_)), "gpt-5-mini")


async def summarize(b: SessionBuilder, keep: int, previous: str | None = None, focus: str | None = None) -> str:
    cut = c.find_cut(b.entries, keep)
    assert cut is not None
    span = rules.summary_span(b.entries, cut.first_kept_entry_id, b.entries[-1].id)
    return await summarizer().summarize(span, previous_summary=previous, custom_instructions=focus,
                                        reserve_tokens=16_384)


# ---------------------------------------------------------------- serialization and prompts


def test_serialization_labels_and_limits() -> None:
    call = AssistantMessage(content=[TextContent(text="Writing."), ToolCall(id="1", name="write",
                                                                           arguments={"path": "a.md", "n": 2})])
    assert serialize_message(call) == ['[Assistant]: Writing.', '[Assistant tool calls]: write(path="a.md", n=2)']
    long = ToolResultMessage(tool_call_id="1", tool_name="read", content=[TextContent(text="x" * 5000)])
    (text,) = serialize_message(long)
    assert text.startswith("[Tool result]: " + "x" * 2000) and "[... 3000 more characters truncated]" in text
    failed = ToolResultMessage(tool_call_id="1", tool_name="edit", content=[TextContent(text="no match")],
                               is_error=True)
    assert serialize_message(failed) == ["[Tool result]: Error: no match"]
    injection = CustomMessage(custom_type="gamma.system_update", content="<system_update>x</system_update>",
                              details={"trusted": True})
    assert serialize_message(injection) == ["[Context]: <system_update>x</system_update>"]


def test_tool_calls_round_trip_through_the_text() -> None:
    b = deck_session(sections=1, words=10)
    text = serialize_entries(b.entries)
    line = next(x for x in text.split("\n\n") if x.startswith("[Assistant tool calls]: skill"))
    calls = parse_calls(line.removeprefix("[Assistant tool calls]: "))
    assert calls == [("skill", {"name": "deck-generation"}), ("skill", {"name": "gml-authoring"})]


def test_prompts_follow_pi() -> None:
    first = prompts.summary_prompt("[User]: hi", None, None)
    assert first.startswith("<conversation>\n[User]: hi\n</conversation>")
    for heading in prompts.SECTIONS:
        assert f"\n{heading}\n" in first
    assert "<previous-summary>" not in first
    update = prompts.summary_prompt("[User]: hi", "## Goal\n- old", "the pricing cards")
    assert "<previous-summary>\n## Goal\n- old\n</previous-summary>" in update
    assert "PRESERVE all existing information" in update
    assert update.endswith("Additional focus: the pricing cards")
    assert "Do NOT continue the conversation" in prompts.SUMMARIZATION_SYSTEM_PROMPT


# ---------------------------------------------------------------- the scripted summarizer


async def test_summary_is_structured_and_about_the_session() -> None:
    b = deck_session(sections=5, words=300)
    summary = await summarize(b, keep=600)
    positions = [summary.index(h + "\n") for h in prompts.SECTIONS]
    assert positions == sorted(positions)
    s = parse_summary(summary)
    assert any("12-card investor deck for Acme Robotics" in g for g in s.get("## Goal"))
    constraints = " ".join(s.get("## Constraints & Preferences"))
    assert "dark theme" in constraints and "never invent revenue numbers" in constraints
    done = s.get("### Done")
    assert "Loaded skill `deck-generation`" in done and "Wrote `cards/01.gml`" in done
    assert "Build the market sizing section" in done
    assert any("Obsidian" in d for d in s.get("## Key Decisions"))
    assert any("`brief.md`" in x for x in s.get("## Critical Context"))


async def test_summaries_differ_with_their_input() -> None:
    a = await summarize(deck_session(sections=4, words=200), keep=400)
    b = SessionBuilder()
    b.user("Import the quarterly report.pdf into a deck and keep the original chart colors.")
    b.calls("", [("read", {"path": "report.pdf"}, "Q3 revenue grew. " * 200)])
    b.calls("", [("edit", {"path": "deck.gml", "old": "a", "new": "b"}, "Error: old text not found in deck.gml")],
            error=True)
    b.calls("", [("todo", {"items": todo_items(0, 3)}, "todo updated")])
    b.user("Also add a summary card at the end, please make it short.")
    b.assistant("ok " * 400)
    other = await summarize(b, keep=300)
    assert a != other
    s = parse_summary(other)
    assert any("Import the quarterly report.pdf" in g for g in s.get("## Goal"))
    assert any("summary card" in g for g in s.get("## Goal"))
    assert any("old text not found in deck.gml" in x for x in s.get("### Blocked"))
    assert s.get("### In Progress") == ["Build the market sizing section"]


async def test_an_update_merges_the_previous_summary() -> None:
    b = deck_session(sections=3, words=300)
    first = await summarize(b, keep=400)
    cut = c.find_cut(b.entries, 400)
    assert cut is not None
    b.compaction(first, cut.first_kept_entry_id, "cr_1", {})
    deck_session(sections=2, words=300, builder=b)
    b.calls("", [("todo", {"items": todo_items(4, 6)}, "todo updated")])
    b.assistant("moving on " * 300)
    second = await summarize(b, keep=400, previous=first)
    old, new = parse_summary(first), parse_summary(second)
    for item in old.get("### Done"):
        assert item in new.get("### Done")
    assert old.get("## Goal")[0] in new.get("## Goal")
    # the task in progress then is complete now
    assert old.get("### In Progress")[0] in new.get("### Done")
    assert new.get("### In Progress") == ["Build the go-to-market plan section"]


async def test_split_turn_gets_a_prefix_summary_and_focus_is_used() -> None:
    b = SessionBuilder()
    b.user("Write the speaker notes for every card.")
    b.assistant("done")
    b.user("Now rebuild all cards with the new pricing data from pricing.csv.")
    for i in range(6):
        b.calls(f"Card {i}.", [("read", {"path": f"cards/{i}.gml"}, "card body " * 150)])
    summary = await summarize(b, keep=500, focus="pricing data")
    head, sep, turn = summary.partition(prompts.SPLIT_TURN_SEPARATOR)
    assert sep and "## Original Request\nNow rebuild all cards" in turn
    assert "## Context for Suffix" in turn
    assert "Requested focus: pricing data" in head


async def test_model_errors_surface() -> None:
    s = summarizer(failures=1)
    with pytest.raises(Exception, match="unavailable"):
        await s.complete("<conversation>\n[User]: hi\n</conversation>", 100)
    assert "## Goal" in await s.complete("<conversation>\n[User]: hi\n</conversation>\n\n" + prompts.SUMMARIZATION_PROMPT, 100)


async def test_an_empty_answer_is_an_error_and_an_empty_conversation_still_has_the_structure() -> None:
    silent = Summarizer(scripted_client(lambda body: ScriptedReply(content="  ")), "gpt-5-mini")
    with pytest.raises(SummaryError, match="empty summary"):
        await silent.complete("<conversation>\n[User]: hi\n</conversation>", 100)
    reply = scripted_summarizer({"messages": [{"role": "user", "content": "no conversation"}]})
    assert reply.content.startswith("## Goal\n- (not stated in the summarized messages)")


def test_a_previous_split_turn_summary_with_file_tags_is_folded_into_the_update() -> None:
    previous = (
        "## Goal\n- Build the board deck\n\n## Progress\n### Done\n- [x] Read `brief.md`\n\n### In Progress\n"
        "- [ ] Draft the cards\n" + prompts.SPLIT_TURN_SEPARATOR + "## Original Request\nAdd a pricing card\n\n"
        "## Early Progress\n- Read `pricing.csv`\n\n## Context for Suffix\n- The enterprise tier is new\n\n"
        "<read-files>\nbrief.md\npricing.csv\n</read-files>"
    )
    sections = parse_summary(previous)
    assert sections.get("## Goal") == ["Build the board deck", "Add a pricing card"]
    assert sections.get("### Done") == ["Read `brief.md`", "Read `pricing.csv`"]
    assert sections.get("## Critical Context") == ["The enterprise tier is new"]
    assert not any(x == "pricing.csv" for v in sections.items.values() for x in v)  # file tags are not items
    conversation = "[User]: Now make the pricing card blue.\n\n[Assistant tool calls]: edit(path=\"cards/07.gml\")" \
                   "\n\n[Tool result]: edited cards/07.gml"
    body = {"messages": [{"role": "system", "content": prompts.SUMMARIZATION_SYSTEM_PROMPT},
                         {"role": "user", "content": prompts.summary_prompt(conversation, previous, None)}]}
    merged = parse_summary(scripted_summarizer(body).content)
    assert merged.get("## Goal")[:2] == ["Build the board deck", "Add a pricing card"]
    assert "Now make the pricing card blue." in merged.get("## Goal")
    assert merged.get("### Done")[:2] == ["Read `brief.md`", "Read `pricing.csv`"]
    assert "Edited `cards/07.gml`" in merged.get("### Done")
    assert merged.get("### In Progress") == ["Draft the cards"]  # no todo update: still in progress
