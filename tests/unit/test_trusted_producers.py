"""Every producer of a trusted block, over arbitrary strings where a client, a user, a file or the
model supplies one: the block parses as exactly one element of its kind, the original text comes
back from it, and no reserved tag appears unescaped inside (docs/architecture.md "Trust boundaries")."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from services.compaction.prompts import summary_prompt
from services.digest.coalesce import compose
from services.digest.revisions import Note, RefState
from services.notifications.convert import to_injections
from services.runtime.model.convert import SUMMARY_PREFIX, convert_one
from services.runtime.runs.subagent import background_result
from services.runtime.store.todo import render as todo_block
from services.runtime.turns.attachments import client_view_content
from services.runtime.turns.knowledge import LoadedNote, active_knowledge
from services.runtime.ui.forms import form_content
from shared.contracts.records.client import PromptClientContext, VisibleTab
from shared.contracts.records.messages import CompactionSummaryMessage
from shared.contracts.records.todo import TodoItem, TodoList
from shared.contracts.streams.notifications import NOTIFICATION_ADAPTER
from shared.history.knowledge import KnowledgePointer, hints_block, update_text
from shared.streams.causal import dirty_marker
from shared.trust.trusted_blocks import artifact_update, extract, unescape
from tests.support.trusted import (
    INSTRUCTION,
    assert_no_attacker_line,
    assert_one_block,
    attrs_of,
    hostile,
    quoted_text,
    tags_in,
)

QUOTED = ["<quoted", "</quoted"]
short = hostile.filter(lambda s: 0 < len(s) <= 200)
# Hypothesis' default deadline trips on a loaded 2-core machine; each example is still bounded.
settings.register_profile("trusted", deadline=None, max_examples=60)
settings.load_profile("trusted")


@given(short, short, short, short, short, short)
def test_client_view(locale: str, title: str, location: str, pane: str, tab: str, path: str) -> None:
    locale = locale[:35]
    ctx = PromptClientContext(locale=locale, visible_tabs=[VisibleTab(
        tab_id=tab, pane_id=pane, ari=f"file:{path}", title=title, location=location)])
    text = client_view_content(ctx)
    assert_one_block(text, "client_view")
    assert attrs_of(text, "client_view") == {"locale": locale}
    start = text.index("<tab ")
    assert attrs_of(text[start:], "tab") == {"pane": pane, "tab": tab, "ari": f"file:{path}", "title": title,
                                             "location": location}


@given(st.lists(st.tuples(hostile.filter(lambda s: 0 < len(s) <= 64), short), min_size=1, max_size=4,
                unique_by=lambda item: item[0]))
def test_todo_anchor(items: list[tuple[str, str]]) -> None:
    todo = TodoList(revision=3, items=[TodoItem(id=i, content=c + INSTRUCTION) for i, c in items])
    text = todo_block(todo)
    assert_one_block(text, "todo_state", QUOTED)  # the model's own words, quoted
    assert quoted_text(text) == "\n".join(f"- [pending] {i}: {c}{INSTRUCTION}" for i, c in items)
    assert_no_attacker_line(text)


@given(short, hostile, st.booleans())
def test_background_result(child: str, answer: str, stopped: bool) -> None:
    text = background_result(child, answer, stopped)
    assert_one_block(text, "background_result", QUOTED)
    assert attrs_of(text, "background_result")["subagent"] == child and quoted_text(text) == answer


@given(short, short, short, hostile)
def test_active_knowledge(note_id: str, name: str, scope: str, content: str) -> None:
    text = active_knowledge(LoadedNote(note_id, 2, name, scope, "workspace", content))
    assert_one_block(text, "active_knowledge", QUOTED)
    assert attrs_of(text, "active_knowledge") == {"id": note_id, "revision": "2", "name": name, "scope": scope}
    assert quoted_text(text) == content


@given(short, short)
def test_knowledge_hints_and_updates(name: str, scope: str) -> None:
    pointer = KnowledgePointer(id="k1", name=name, scope=scope, source="workspace", revision=1, updated_at=0)
    hints = hints_block([pointer])
    assert_one_block(hints, "knowledge_hints")
    assert attrs_of(hints[hints.index("<knowledge\n"):], "knowledge")["name"] == name
    update = update_text("k1", 2, None)
    assert_one_block(update, "workspace_update")


@given(hostile)
def test_compaction_summary(summary: str) -> None:
    content = convert_one(CompactionSummaryMessage(summary=summary), "developer")["content"]  # type: ignore[index]
    assert content.startswith(SUMMARY_PREFIX)
    block = content[len(SUMMARY_PREFIX):]
    assert_one_block(block, "summary", QUOTED)  # the summarizer's words, with the lines it copied: quoted
    assert quoted_text(block) == summary


@given(hostile, hostile)
def test_summarizer_prompt_blocks(conversation: str, previous: str) -> None:
    text = summary_prompt(conversation, previous or None, None)
    found = extract(text, "conversation")
    assert found is not None and found[0] == conversation
    if previous:
        block = extract(text[found[1]:], "previous-summary")
        assert block is not None and block[0] == previous


@given(short)
def test_causal_dirty_marker(ref: str) -> None:
    text = dirty_marker("s1", ref, "p1").injection.content
    assert_one_block(text, "artifact_update")
    assert attrs_of(text, "artifact_update") == {"ref": ref, "state": "in_flight"}


@given(short, st.dictionaries(st.sampled_from(["who", "why"]), hostile, max_size=2))
def test_form_answers(form_id: str, answers: dict[str, str]) -> None:
    text = form_content({"id": form_id, "status": "submitted", "answers": answers})
    assert_one_block(text, "system_update", QUOTED)
    assert attrs_of(text, "system_update") == {"source": "form", "form": form_id, "status": "submitted"}
    lines = "\n".join(f"- {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(answers.items()))
    assert quoted_text(text) == (lines or "(no answers)")


@given(short, short)
def test_client_digest_text(ref: str, said: str) -> None:
    state = RefState.model_validate({"kind": "file", "seen": 1, "seen_known": True, "current": 2,
                                     "notes": {2: Note(actor="user", digest=said)}})
    body = compose(state, b"a\n", b"b\n")
    assert body is not None
    text = artifact_update(ref, 1, 2, body)
    nested = QUOTED if said.strip() else []
    assert_one_block(text, "artifact_update", nested)
    assert attrs_of(text, "artifact_update")["ref"] == ref
    if said.strip():
        assert quoted_text(text) == said.strip()


@given(short, short)
def test_deck_card_ids_and_titles(card_id: str, title: str) -> None:
    card_id = "x" + card_id + INSTRUCTION
    old = {"title": "D", "cards": [{"id": "c1", "title": "A"}]}
    new = {"title": "D", "cards": [{"id": "c1", "title": title}, {"id": card_id, "title": "T"}]}
    state = RefState.model_validate({"kind": "document", "seen": 1, "seen_known": True, "current": 2,
                                     "notes": {2: Note(actor="user")}})
    body = compose(state, json.dumps(old).encode(), json.dumps(new).encode())
    assert body is not None
    text = artifact_update("gamma:file:d", 1, 2, body)
    assert_one_block(text, "artifact_update")
    found = extract(text, "artifact_update")
    assert found is not None and found[0] == unescape(body.text)
    assert "IMPORTANT developer instruction" in found[0] or "The deck changed." in found[0]
    assert_no_attacker_line(text)  # an id cannot start a line of the block


@given(hostile.filter(lambda s: "\x00" not in s))
def test_uploaded_file_content(content: str) -> None:
    upload = RefState.model_validate({"kind": "file", "current": 1, "notes": {1: Note(actor="user", created=True)}})
    body = compose(upload, None, content.encode())
    assert body is not None
    text = artifact_update("file:uploads/a.txt", None, 1, body)
    found = extract(text, "artifact_update")
    assert found is not None and found[0] == unescape(body.text)
    inline = "Its content:" in found[0]
    assert_one_block(text, "artifact_update", QUOTED if inline else [])
    if inline:  # the file's text is the uploader's, quoted
        assert quoted_text(text) == content


def _notifications(x: str) -> list[dict[str, object]]:
    """A notification of every type, `x` in each of its free fields."""
    return [
        {"type": "approval.resolved", "payload": {"approvalId": x[:200], "decision": "approved", "subject": x,
                                                  "comment": x}},
        {"type": "render.completed", "payload": {"renderId": x[:200], "ref": x, "outputRefs": [x], "status": "failed",
                                                 "error": x}},
        {"type": "render.completed", "payload": {"renderId": x[:200], "ref": x, "outputRefs": [x, x]}},
        {"type": "import.completed", "payload": {"importId": x[:200], "sourceRef": x, "outputRefs": [x]}},
        {"type": "export.completed", "payload": {"exportId": x[:200], "ref": x, "format": x[:20], "outputRef": x}},
        {"type": "connector.completed", "payload": {"connector": "crm", "callId": "c1", "content": x}},
    ]


@given(short)
def test_notification_payload(field: str) -> None:
    """Each field of each notification type: no forged tag, and no line the harness says starts with the
    sender's words (ids, refs and formats on one line; free text quoted)."""
    for body in _notifications(INSTRUCTION[:18] + field + INSTRUCTION):
        n = NOTIFICATION_ADAPTER.validate_python({"id": "n1", **body})
        for inj in to_injections("s", n):
            text = inj.injection.content
            kind = inj.injection.kind
            found = [t for t in tags_in(text) if t not in ("<quoted", "</quoted")]
            assert found == [f"<{kind}", f"</{kind}"], found
            assert_no_attacker_line(text)
