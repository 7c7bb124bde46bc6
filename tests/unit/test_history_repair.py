"""A history repair on replay (shared/history/history_repair.py, shared/history/context.py): the transcript keeps its
lines; every replay (the next turn, a wake, compaction) applies the `history_repair` entries to the
messages before them, and only to those."""

from __future__ import annotations

from pathlib import Path

from services.runtime.hosting.model_calls import record_repair
from services.runtime.model.attempts import HistoryRepair
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.messages import (
    AssistantMessage,
    ImageRef,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from shared.history.context import build_context
from shared.history.history_repair import IMAGE_REMOVED, REDACTED

REF = ImageRef(sha256="b" * 64, mime_type="image/png", width=4, height=4, bytes=10)


def thinking(n: int) -> AssistantMessage:
    item = {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": "gAAA"}
    return AssistantMessage(model="gpt-5-mini", content=[ThinkingContent(thinking=f"t{n}", item=item),
                                                         TextContent(text=f"a{n}")])


async def no_guard() -> None:
    return None


def items(m: object) -> list[object]:
    assert isinstance(m, AssistantMessage)
    return [c.item for c in m.content if isinstance(c, ThinkingContent)]


async def test_repairs_apply_on_every_replay_to_what_came_before(tmp_path: Path) -> None:
    t = Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard))
    await t.ensure_header()
    photo = UserMessage(content="look", images=[REF])
    for m in (photo, thinking(1), UserMessage(content="again")):
        await t.append_message(m)
    await record_repair(t, HistoryRepair("strip_reasoning", [], True, "400 invalid_encrypted_content: x"))
    live = t.context()
    await record_repair(t, HistoryRepair("remove_images", [live[0]], False, "400 invalid_image: y"))
    await t.append_message(thinking(2))
    await t.append_message(UserMessage(content="new", images=[REF]))

    for replay in (t.context(), build_context(Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard)).entries)):
        first, a1, _, a2, last = replay
        assert isinstance(first, UserMessage) and first.images is None and first.content == f"look\n{IMAGE_REMOVED}"
        assert items(a1) == [None] and items(a2) != [None]  # a reasoning item made after the repair is replayed
        assert isinstance(last, UserMessage) and last.images == [REF]  # an image sent after it is kept
    lines = (tmp_path / "t.jsonl").read_text()
    assert '"rs_1"' in lines and '"history_repair"' in lines  # the transcript's own lines are never rewritten


async def test_a_redacted_item_keeps_its_tool_calls_and_results_keep_their_pairing(tmp_path: Path) -> None:
    t = Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard))
    await t.ensure_header()
    call = AssistantMessage(content=[TextContent(text="flagged words"), ToolCall(id="c1", name="read", arguments={})],
                            stop_reason="toolUse")
    result = ToolResultMessage(tool_call_id="c1", tool_name="read", content=[TextContent(text="flagged output")])
    for m in (UserMessage(content="go"), call, result):
        await t.append_message(m)
    await record_repair(t, HistoryRepair("redact", [t.context()[2]], False, "400 content_filter"))
    _, kept_call, redacted = t.context()
    assert isinstance(kept_call, AssistantMessage) and kept_call.text() == "flagged words"
    assert isinstance(redacted, ToolResultMessage) and redacted.text() == REDACTED and redacted.tool_call_id == "c1"
