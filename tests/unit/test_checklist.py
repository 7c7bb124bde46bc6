"""Workflow checklists (shared/ui/checklist.py) and their declaration beside SKILL.md (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools")."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime.skillset.audit import engaged, reported, workflow_window
from services.runtime.skillset.skills import SkillError, load_skills
from shared.contracts.records.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from shared.contracts.records.todo import TodoItem
from shared.contracts.records.transcript import AuditEntry, Deviation, MessageEntry, SkillActivationEntry
from shared.history.context import build_context
from shared.ui.checklist import (
    CallRecord,
    current_index,
    evaluate,
    in_order,
    missing,
    parse_checklist,
    tool_calls,
)

ROOT = Path(__file__).resolve().parents[2]
CHECKLIST = parse_checklist({"steps": [
    {"id": "brief", "title": "Write the brief", "evidence": {"tool": "write", "args": {"path": r"brief\.xml$"}}},
    {"id": "notes", "title": "Notes", "kind": "optional", "evidence": {"tool": "write", "args": {"path": "notes"}}},
    {"id": "validate", "title": "Validate", "kind": "verification",
     "evidence": {"tool": "bash", "args": {"command": r"\bvalidate\b"}}},
    {"id": "todo-complete", "title": "Todo complete", "kind": "verification", "evidence": {"todo": "complete"}},
]})


def calls(*specs: tuple[str, dict[str, object], bool]) -> list[CallRecord]:
    return [CallRecord(i, name, args, ok) for i, (name, args, ok) in enumerate(specs)]


def test_every_shipped_workflow_declares_a_checklist_of_real_steps() -> None:
    skills = load_skills(ROOT / "skills")
    workflows = [s for s in skills.values() if s.type == "workflow"]
    assert {s.name for s in workflows} == {"deck-generation", "gml-editing", "import"}
    for s in workflows:
        checklist = s.manifest.checklist
        assert checklist is not None, s.name
        kinds = {st.kind for st in checklist.steps}
        assert {"required", "verification"} <= kinds
        assert any(st.evidence.todo == "complete" for st in checklist.steps)
    assert all(s.manifest.checklist is None for s in skills.values() if s.type == "reference")


def test_evidence_needs_a_successful_matching_call_and_the_todo_state() -> None:
    done = [TodoItem(id="a", content="x", status="complete")]
    st = {s.id: s for s in evaluate(CHECKLIST, calls(
        ("write", {"path": "gen/brief.xml"}, True), ("bash", {"command": "gml validate d.json"}, False),
        ("todo", {"items": []}, True)), done)}
    assert st["brief"].status == "done" and st["brief"].at == 0
    assert st["validate"].status == "skipped"  # failed (exit 1): not done; a later step (todo) is done
    assert st["notes"].status == "skipped" and st["todo-complete"].status == "done"
    assert [s.id for s in missing(list(st.values()))] == ["validate"]  # optional steps are never audited
    # a todo list left complete by an earlier task is not this task's: the window needs a todo update
    assert evaluate(CHECKLIST, [], done)[-1].status == "pending"
    pending = evaluate(CHECKLIST, calls(("write", {"path": "brief.xml"}, True)),
                       [TodoItem(id="a", content="x", status="in_progress")])
    assert [s.status for s in pending] == ["done", "pending", "pending", "pending"]
    assert current_index(pending) == 3  # step 3 of 4: the optional step 2 is not where the agent stands


def test_order_uses_the_first_time_each_step_was_done() -> None:
    statuses = evaluate(CHECKLIST, calls(("bash", {"command": "validate x"}, True), ("write", {"path": "brief.xml"}, True)),
                        [])
    assert not in_order(statuses, ["brief", "validate"]) and in_order(statuses, ["validate", "brief"])


@pytest.mark.parametrize("bad, needle", [
    ({"steps": []}, "steps"),
    ({"steps": [{"id": "A b", "title": "t", "evidence": {"tool": "x"}}]}, "lowercase"),
    ({"steps": [{"id": "a", "title": "t", "evidence": {}}]}, "exactly one"),
    ({"steps": [{"id": "a", "title": "t", "evidence": {"tool": "bash", "args": {"command": "("}}}]}, "regular expression"),
    ({"steps": [{"id": "a", "title": "t", "evidence": {"tool": "x"}}, {"id": "a", "title": "u", "evidence": {"tool": "y"}}]},
     "unique"),
])
def test_malformed_checklists_are_refused_with_the_field(bad: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_checklist(bad)


def test_a_skill_naming_a_missing_or_bad_checklist_file_fails_to_load(tmp_path: Path) -> None:
    d = tmp_path / "skills" / "wf"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text("---\nname: wf\ndescription: TRIGGER on x\nmetadata:\n  type: workflow\n"
                                "  checklist: checklist.yaml\n---\nbody\n")
    with pytest.raises(SkillError, match="metadata.checklist.*not found"):
        load_skills(tmp_path / "skills")
    (d / "checklist.yaml").write_text("steps: [{id: a, title: t, evidence: {todo: nope}}]\n")
    with pytest.raises(SkillError, match="metadata.checklist"):
        load_skills(tmp_path / "skills")


def _message(i: int, message: object) -> MessageEntry:
    return MessageEntry(id=f"m{i}", timestamp="2026-01-01T00:00:00.000Z", message=message)


def test_audit_entries_are_not_model_context_and_end_a_task_window() -> None:
    ts = "2026-01-01T00:00:00.000Z"
    entries = [
        SkillActivationEntry(id="s", timestamp=ts, name="wf", skill_type="workflow"),
        _message(1, UserMessage(content="go")),
        _message(2, AssistantMessage(content=[ToolCall(id="c1", name="write", arguments={"path": "brief.xml"})])),
        _message(3, ToolResultMessage(tool_call_id="c1", tool_name="write")),
        AuditEntry(id="a1", timestamp=ts, workflow="wf", outcome="passed", tool_call_id="c9"),
        _message(4, UserMessage(content="thanks")),
    ]
    assert [type(m).__name__ for m in build_context(entries)] == ["UserMessage", "AssistantMessage",
                                                                   "ToolResultMessage", "UserMessage"]
    assert tool_calls(entries)[0].ok
    assert workflow_window(entries, "wf") == 5  # after the final audit: the next task starts there
    window = entries[5:]
    assert not engaged(window, "wf", CHECKLIST, evaluate(CHECKLIST, tool_calls(window), []))
    first = entries[:5]
    assert engaged(first, "wf", CHECKLIST, evaluate(CHECKLIST, tool_calls(first), []))


def test_reported_reads_the_declared_deviations_not_the_text() -> None:
    gaps = missing(evaluate(CHECKLIST, [], []))
    every = [Deviation(step=s.id, cause="the tool is down") for s in gaps]
    assert reported(every, gaps)
    assert not reported(every[:-1], gaps)  # one missing step not declared
    assert not reported([Deviation.model_construct(step="brief", cause="  ")] + every[1:], gaps)  # a blank cause is no cause
    assert not reported([], gaps)
    assert reported([], [])  # nothing missing, nothing to declare
    with pytest.raises(ValueError):
        Deviation(step="", cause="x")


def test_the_dormant_preview_hides_a_refused_completion() -> None:
    from services.proxy.dormant.preview import display_entries

    ts = "2026-01-01T00:00:00.000Z"
    entries = [_message(i, m).model_dump(mode="json", by_alias=True) for i, m in enumerate([
        AssistantMessage(content=[ToolCall(id="c1", name="message_user", arguments={"message": "Done", "blockOnUser": True})]),
        ToolResultMessage(tool_call_id="c1", tool_name="message_user", is_error=True),
        AssistantMessage(content=[ToolCall(id="c2", name="message_user", arguments={"message": "Done. Deviations: x",
                                                                                    "blockOnUser": True})]),
        ToolResultMessage(tool_call_id="c2", tool_name="message_user"),
    ])]
    entries.insert(2, AuditEntry(id="a", timestamp=ts, workflow="wf", outcome="blocked", tool_call_id="c1")
                   .model_dump(mode="json", by_alias=True))
    assert [e["text"] for e in display_entries(entries)] == ["Done. Deviations: x"]
