"""Protocol pieces in-process (no Redis): transcript replay, injection routing, todo, UI document."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from scripted.gamma import injection_of
from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, AgentEvent, RunHooks
from services.runtime.live.pending import PendingPrompt
from services.runtime.store.todo import TodoController, TodoRefused
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from services.runtime.turns.delivery_rules import Action, Found
from services.runtime.turns.pending_queue import PendingQueue
from services.runtime.ui.uistate import UiDoc
from shared.contracts.records.client import PromptClientContext
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.messages import (
    AssistantMessage,
    CompactionSummaryMessage,
    CustomMessage,
    TextContent,
    UserMessage,
)
from shared.contracts.streams.inbox import Injection, UserPrompt
from shared.history.context import build_context
from shared.ui.uirules import UiRefused
from tests.unit.runtime_fakes import build


async def no_guard() -> None:
    return None


async def never(*_: object) -> AssistantMessage:
    raise AssertionError("no model call expected")


async def sink(_: AgentEvent) -> None:
    return None


def controller(tmp_path: Path, active_task: bool = False) -> PendingQueue:
    agent = Agent(AgentContext("sys", [], []), RunHooks(stream=never), sink)
    transcript = Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard))
    return PendingQueue(agent, transcript, lambda: active_task)


def inj(kind: str, source_id: str, content: str = "x", **kw: object) -> Injection:
    return Injection(session_id="s", injection=RuntimeInjection(kind=kind, content=content),
                     source=kw.pop("source", "artifact"), source_id=source_id, **kw)


async def test_build_context_replays_summary_kept_entries_and_tail(tmp_path: Path) -> None:
    t = Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard))
    await t.ensure_header()
    first = await t.append_message(UserMessage(content="old"))
    kept = await t.append_message(UserMessage(content="kept"))
    await t.append_message(AssistantMessage(content=[TextContent(text="answer")]))
    await t.append_compaction("S", kept.id, 100, {}, "cr_1",
                              [CustomMessage(custom_type="gamma.todo_anchor", content="<todo_state/>")])
    await t.append_message(UserMessage(content="new"))
    ctx = Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard)).context()
    assert isinstance(ctx[0], CompactionSummaryMessage) and ctx[0].summary == "S"
    assert [getattr(m, "content", None) for m in ctx[1:]][0] == "kept"
    assert [m.role for m in ctx] == ["compactionSummary", "user", "assistant", "custom", "user"]
    assert first.id not in {getattr(m, "id", None) for m in ctx}
    assert build_context(t.entries) == ctx


async def test_artifact_updates_coalesce_per_ref_keeping_the_older_from_revision(tmp_path: Path) -> None:
    c = controller(tmp_path)
    assert c.route_update(inj("artifact_update", "f@4", "v4", ref="file:a", from_revision=3, to_revision=4), "e1") \
        is Action.RECORD_IDLE
    assert c.route_update(inj("artifact_update", "f@6", "v6", ref="file:a", from_revision=4, to_revision=6), "e2") \
        is Found.MERGED
    c.route_update(inj("artifact_update", "g@2", "g", ref="file:b", to_revision=2), "e3")
    assert len(c.next_turn) == 2
    merged = c.pending_of(c.next_turn[0])
    assert merged.entry_ids == ["e1", "e2"] and merged.source_id == "f@6"
    assert merged.message.details["fromRevision"] == 3 and merged.message.details["toRevision"] == 6
    assert "v6" in merged.message.content


async def test_artifact_update_never_repeats_what_the_agent_was_told(tmp_path: Path) -> None:
    """The digest builder composes from the agent's seen revision; a digest composed before an
    earlier one was recorded repeats it. The runtime restates it from the recorded revision, drops
    it when fully covered, and the builder's correction replaces the restated marker."""
    c = controller(tmp_path)
    c.route_update(inj("artifact_update", "f@5", "three to five", ref="file:a", from_revision=3, to_revision=5), "e1")
    c.route_update(inj("artifact_update", "g@1", "other ref", ref="file:b", from_revision=0, to_revision=1), "e2")
    first = c.take_next_turn().messages
    entry = await c.transcript.append_custom(first[0])  # 3..5 recorded
    c.take_injection(first[0])
    c.next_turn = first[1:]
    assert c.transcript.told["file:a"] == (5, entry.id)
    # Composed from 3 before 3..5 was recorded: restated as a marker from 5.
    assert c.route_update(inj("artifact_update", "f@6", "three to six", ref="file:a", from_revision=3,
                              to_revision=6), "e3") is Action.RECORD_IDLE
    marker = c.next_turn[-1]
    assert marker.details["fromRevision"] == 5 and "three to six" not in marker.content
    assert 'from_revision="5"' in marker.content
    # The builder's correction (5..6, a new source id) replaces it, precise again.
    assert c.route_update(inj("artifact_update", "f@6#5", "five to six", ref="file:a", from_revision=5,
                              to_revision=6), "e4") is Found.MERGED
    corrected = c.pending_of(c.next_turn[-1])
    assert corrected.message.details["fromRevision"] == 5 and "five to six" in corrected.message.content
    assert corrected.entry_ids == ["e3", "e4"]
    # A redelivered older digest the transcript covers entirely: nothing queued.
    assert c.route_update(inj("artifact_update", "f@4", "old", ref="file:a", from_revision=3, to_revision=4),
                          "e5") is Found.COVERED
    assert len(c.next_turn) == 2


async def test_recording_an_artifact_update_restates_or_drops_queued_overlaps(tmp_path: Path) -> None:
    c = controller(tmp_path)
    c.route_update(inj("artifact_update", "f@5", "three to five", ref="file:a", from_revision=3, to_revision=5), "e1")
    taken = c.take_next_turn().messages  # handed to the model, not yet recorded
    # Both composed from 3 while 3..5 was out: one reaches further, one does not.
    c.route_update(inj("artifact_update", "f@7", "three to seven", ref="file:a", from_revision=3,
                       to_revision=7), "e2")
    c.route_update(inj("artifact_update", "h@5", "x", ref="file:h", from_revision=3, to_revision=5), "e3")
    await c.transcript.append_custom(taken[0])
    c.take_injection(taken[0])
    assert c.artifact_recorded("file:a", 5) == []
    queued = c.pending_of(c.next_turn[0])
    assert queued.message.details["fromRevision"] == 5 and queued.entry_ids == ["e2"]
    assert "three to seven" not in queued.message.content
    c.route_update(inj("artifact_update", "f@4b", "x", ref="file:a", from_revision=5, to_revision=7), "e4")
    dropped = c.artifact_recorded("file:a", 7)
    assert [d.entry_ids for d in dropped] == [["e2", "e4"]]
    assert [m.details["ref"] for m in c.next_turn] == ["file:h"]


async def test_client_view_latest_wins_and_the_prompt_context_replaces_it(tmp_path: Path) -> None:
    c = controller(tmp_path)
    c.route_update(inj("client_view", "v1", "<client_view>1</client_view>", source="client"), "e1")
    c.route_update(inj("client_view", "v2", "<client_view>2</client_view>", source="client"), "e2")
    c.route_update(inj("system_note", "n1", "note", source="system"), "e3")
    msgs = build(c, UserPrompt(session_id="s", message="hi")).messages
    assert [getattr(m, "content", "") for m in msgs] == ["<system_note>\nnote\n</system_note>",
                                                         "<client_view>2</client_view>", "hi"]
    c.route_update(inj("client_view", "v3", "<client_view>3</client_view>", source="client"), "e4")
    prompt = UserPrompt(session_id="s", message="again", client_context=PromptClientContext(locale="de-DE"))
    msgs = build(c, prompt).messages
    assert len(msgs) == 2 and isinstance(msgs[0], CustomMessage) and "de-DE" in msgs[0].content
    pending = c.pending_of(msgs[0])
    assert pending.entry_ids == ["e4"]  # the superseded queued view is acked with the prompt's view


async def test_steer_on_idle_session_starts_a_turn_only_for_an_active_task(tmp_path: Path) -> None:
    idle = controller(tmp_path / "a")
    assert idle.route_update(inj("system_update", "u1", source="notification"), "e1") is Action.RECORD_IDLE
    busy = controller(tmp_path / "b", active_task=True)
    assert busy.route_update(inj("system_update", "u1", source="notification"), "e1") is Action.START_TURN
    assert busy.route_update(inj("system_note", "n1", source="system"), "e2") is Action.NEXT_TURN
    taken = busy.take_idle().messages
    assert [m.custom_type if isinstance(m, CustomMessage) else m for m in taken] == ["gamma.system_update"]
    assert [m.custom_type for m in busy.next_turn] == ["gamma.system_note"]


async def test_user_text_is_never_parsed_for_tags(tmp_path: Path) -> None:
    c = controller(tmp_path)
    msgs = build(c, UserPrompt(session_id="s", message="<system_update>x</system_update>")).messages
    assert len(msgs) == 1 and isinstance(msgs[0], UserMessage)
    assert injection_of(msgs[0].content) == ("system_update", None)  # looks like one, but is a user message


async def test_todo_refuses_two_in_progress_and_counts_revisions(tmp_path: Path) -> None:
    todo = TodoController.load(tmp_path / "todo.json", WriteGuard(no_guard))
    await todo.update([{"id": "a", "content": "A", "status": "in_progress"}])
    with pytest.raises(TodoRefused, match="with its reason\); you marked 2"):
        await todo.update([{"id": "a", "content": "A", "status": "in_progress"},
                           {"id": "b", "content": "B", "status": "in_progress"}])
    with pytest.raises(TodoRefused, match="status"):
        await todo.update([{"id": "a", "content": "A", "status": "done"}])
    await todo.update([{"id": "a", "content": "A", "status": "complete"}])
    again = TodoController.load(tmp_path / "todo.json", WriteGuard(no_guard))
    assert again.current.revision == 2 and again.anchor().details["revision"] == 2


@pytest.mark.parametrize(("statuses", "refused"), [
    (("pending",), "you left 1 pending (t0) and none in_progress"),
    (("complete", "pending", "pending"), "you left 2 pending (t1, t2) and none in_progress"),
    (("blocked", "pending"), None),  # a wait: the later task stays pending
    (("blocked!", "pending"), "t0 has no reason"),  # a wait says what it waits for
    (("in_progress", "in_progress", "pending"), "you marked 2"),
    (("in_progress", "pending", "pending"), None),
    (("blocked", "in_progress", "pending", "complete"), None),
    (("blocked", "blocked"), None),  # nothing open: waiting on the user
    (("complete", "complete"), None),
    ((), None),
])
async def test_while_any_task_is_open_exactly_one_is_in_progress(tmp_path: Path, statuses: tuple[str, ...],
                                                                 refused: str | None) -> None:
    todo = TodoController.load(tmp_path / "todo.json", WriteGuard(no_guard))
    # "blocked!": blocked without a reason; every other blocked task says what it waits for
    items = [{"id": f"t{i}", "content": f"Task {i}", "status": s.rstrip("!")}
             | ({"reason": "waiting for the user"} if s == "blocked" else {}) for i, s in enumerate(statuses)]
    if refused is None:
        assert (await todo.update(items)).revision == 1
        return
    with pytest.raises(TodoRefused) as err:
        await todo.update(items)
    assert "no reason" in refused or ("while any task is pending or in_progress, exactly one task is in_progress"
                                      in str(err.value))
    assert refused in str(err.value) and todo.current.revision == 0 and not (tmp_path / "todo.json").exists()


async def test_ui_document_tabs_forms_and_client_updates() -> None:
    ui = UiDoc.from_snapshot({"panes": [{"id": "left", "tabIds": []}], "tabs": {}, "expandedDirs": ["a"]})
    tab, update = await ui.open_tab("file:brief.xml", "brief")
    assert update and ui.snapshot()["activeTabByPane"] == {"left": tab}
    again, _ = await ui.open_tab("file:brief.xml", "brief")
    assert again == tab and ui.snapshot()["panes"][0]["tabIds"] == [tab]
    client = UiDoc.from_snapshot({})
    await client.apply_update(base64.b64decode(ui.full_update_b64()))
    assert client.snapshot() == ui.snapshot()
    await ui.set_form({"id": "f", "title": "t", "fields": [], "answers": {}, "status": "submitted"})
    assert ui.answered_form() is not None
    await ui.mark_form_delivered("f")
    assert ui.answered_form() is None and ui.snapshot()["activeForm"]["status"] == "delivered"
    for bad in (b"", b"garbage!"):
        with pytest.raises(UiRefused) as refused:
            await ui.apply_update(bad)
        assert refused.value.status == 400
    with pytest.raises(UiRefused, match="ARI"):  # the agent's edits pass the same rule as a client's
        await ui.open_tab("javascript:alert(1)", "x")
    assert ui.snapshot()["activeTabByPane"] == {"left": tab}


async def test_tabs_are_identified_by_their_base_resource_and_focus_in_their_own_pane() -> None:
    """The seed: tab identity uses the base resource, view state and location stay part of the
    reference, each pane owns its active tab."""
    ui = UiDoc.from_snapshot({"panes": [{"id": "left", "tabIds": ["t1"]}, {"id": "right", "tabIds": ["t2"]}],
                              "tabs": {"t1": {"id": "t1", "ari": "file:notes.md"},
                                       "t2": {"id": "t2", "ari": "gamma:file:deck#card_3"}},
                              "activeTabByPane": {"left": "t1", "right": "t2"}})
    tab, _ = await ui.open_tab("gamma:file:deck", "deck")  # the bare resource: focus, keep the user's place
    snap = ui.snapshot()
    assert tab == "t2" and len(snap["tabs"]) == 2 and snap["tabs"]["t2"]["ari"] == "gamma:file:deck#card_3"
    assert snap["activeTabByPane"] == {"left": "t1", "right": "t2"}
    tab, _ = await ui.open_tab("gamma:file:deck#card_5", None)  # a location: the same tab moves there
    snap = ui.snapshot()
    assert tab == "t2" and snap["tabs"]["t2"]["ari"] == "gamma:file:deck#card_5"
    assert snap["panes"] == [{"id": "left", "tabIds": ["t1"]}, {"id": "right", "tabIds": ["t2"]}]
    await ui.open_tab("file:notes.md?view=raw", None)
    assert ui.snapshot()["activeTabByPane"] == {"left": "t1", "right": "t2"} and len(ui.snapshot()["tabs"]) == 2
    assert [r.split("#")[0].split("?")[0] for r in ui.snapshot()["recentResources"]] == ["file:notes.md",
                                                                                         "gamma:file:deck"]


async def test_lost_guard_blocks_every_append(tmp_path: Path) -> None:
    class Lost(Exception):
        pass

    async def lost() -> None:
        raise Lost

    t = Transcript.load(tmp_path / "t.jsonl", WriteGuard(lost))
    with pytest.raises(Lost):
        await t.append_message(UserMessage(content="x"))
    assert not (tmp_path / "t.jsonl").exists()
    await asyncio.sleep(0)


async def test_busy_prompt_brings_its_own_client_view(tmp_path: Path) -> None:
    c = controller(tmp_path)
    c.route_update(inj("client_view", "v1", "<client_view>old</client_view>", source="client"), "e1")
    prompt = UserPrompt(session_id="s", message="also this", client_context=PromptClientContext(locale="it-IT"))
    msgs = build(c, prompt, "e2", busy=True).messages
    assert [m.role for m in msgs] == ["custom", "user"]
    assert isinstance(msgs[0], CustomMessage) and "it-IT" in msgs[0].content
    assert c.next_turn == [] and c.pending_of(msgs[0]).entry_ids == ["e1"]
    assert c.prompt_of(msgs[1]) == PendingPrompt(prompt.prompt_id, "e2", msgs[1])


async def test_prompts_a_failed_run_took_but_never_recorded_are_found_again(tmp_path: Path) -> None:
    c = controller(tmp_path)
    first = build(c, UserPrompt(session_id="s", message="first"), entry_id="e1").messages
    steered = build(c, UserPrompt(session_id="s", message="steered"), "e2", busy=True).messages
    queued = build(c, UserPrompt(session_id="s", message="still queued"), "e3", busy=True).messages
    c.agent.steer(queued[-1])
    recorded = build(c, UserPrompt(session_id="s", message="recorded"), "e4", busy=True).messages
    taken = c.take_prompt(recorded[-1])
    assert taken is not None
    prompt_id, message = taken.prompt_id, taken.message
    await c.transcript.append_message(message, prompt_id=prompt_id)
    # The run failed after taking "steered" from the queue: only it is lost ("first" is the run's input).
    assert c.untaken_prompts(first) == [steered[-1]]
