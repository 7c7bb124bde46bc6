"""The exactly-once auditor itself, on hand-made transcripts: it must see each kind of defect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.reliability.workload import DECK_REF, FILE_REF, Audit, PromptRecord, SessionRecord, audit_session


def entry(eid: str, parent: str | None, ts: str, **body: Any) -> dict[str, Any]:
    return {"id": eid, "parentId": parent, "timestamp": f"2026-12-02T10:00:{ts}Z", **body}


def user(eid: str, parent: str, ts: str, token: str) -> dict[str, Any]:
    return entry(eid, parent, ts, type="message", message={"role": "user", "content": f"load prompt {token}"},
                 promptId="p_" + eid)


def answer(eid: str, parent: str, ts: str) -> list[dict[str, Any]]:
    call = {"type": "toolCall", "id": "c" + eid, "name": "message_user", "arguments": {"message": "ok"}}
    return [
        entry("a" + eid, parent, ts, type="message", message={"role": "assistant", "content": [call]}),
        entry(eid, "a" + eid, ts, type="message", message={
            "role": "toolResult", "toolCallId": "c" + eid, "toolName": "message_user",
            "content": [{"type": "text", "text": "delivered"}], "details": {"blockOnUser": True}}),
    ]


def injection(eid: str, parent: str, ts: str, source: str, source_id: str, content: str) -> dict[str, Any]:
    kind = "artifact_update" if source == "artifact" else "system_update"
    return entry(eid, parent, ts, type="custom_message", customType=f"gamma.{kind}", content=content, display=False,
                 details={"trusted": True, "injectionType": kind, "source": source, "sourceId": source_id})


def digest(eid: str, parent: str, ts: str, ref: str, lo: int, hi: int) -> dict[str, Any]:
    return injection(eid, parent, ts, "artifact", f"{ref}@{hi}",
                     f'<artifact_update ref="{ref}" from_revision="{lo}" to_revision="{hi}">\nchanged\n</artifact_update>')


def write(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    d = tmp_path / "s1"
    d.mkdir()
    header = {"id": "h", "parentId": None, "timestamp": "2026-12-02T10:00:00.000Z", "type": "session", "version": 3}
    (d / "transcript.jsonl").write_text("\n".join(json.dumps(e) for e in [header, *entries]) + "\n")
    return d


def record(tokens: list[str]) -> SessionRecord:
    rec = SessionRecord(sid="s1", prompts=[PromptRecord(token=t, sent_at=0, prompt_id="p") for t in tokens])
    rec.notifications = {"n1": 0.0}
    rec.edits = {FILE_REF: [0.0, 0.0], DECK_REF: [0.0]}
    return rec


def clean_session() -> list[dict[str, Any]]:
    return [
        injection("i1", "h", "01.000", "notification", "n1", "<system_update>render failed</system_update>"),
        digest("d1", "i1", "01.100", FILE_REF, 0, 2),
        digest("d2", "d1", "01.200", DECK_REF, 0, 1),
        user("u1", "d2", "01.300", "[s1:0:aaaaaaaa]"),
        *answer("r1", "u1", "01.400"),
    ]


def test_a_clean_session_passes(tmp_path: Path) -> None:
    audit = Audit()
    audit_session(record(["[s1:0:aaaaaaaa]"]), write(tmp_path, clean_session()), audit, {FILE_REF: 2, DECK_REF: 1})
    assert audit.ok and not audit.stuck and audit.entries_checked == 7 and audit.prompts_checked == 1


def test_each_defect_is_seen(tmp_path: Path) -> None:
    entries = clean_session()
    entries += [
        digest("d3", "r1", "02.000", FILE_REF, 0, 3),  # overlaps 0..2 already recorded
        *answer("r2", "d3", "02.100"),  # a second answer to the same prompt
        injection("i2", "r2", "02.200", "notification", "n1", "<system_update>again</system_update>"),
        entry("x1", "h", "00.500", type="custom_message", customType="gamma.note", content="late",
              display=False, details={}),  # a fork written late by a paused writer
    ]
    audit = Audit()
    rec = record(["[s1:0:aaaaaaaa]", "[s1:1:bbbbbbbb]", "[s1:2:cccccccc]"])
    audit_session(rec, write(tmp_path, entries), audit, {FILE_REF: 3, DECK_REF: 4}, pending={"[s1:2:cccccccc]"},
                  digest_seen={DECK_REF: 2})
    text = "\n".join(audit.duplicates)
    assert "overlaps what was recorded" in text and "a second answer run" in text
    assert "('notification', 'n1') recorded 2 times" in text
    assert any("[s1:1:bbbbbbbb] never recorded" in loss for loss in audit.losses)  # acked, gone
    assert any("[s1:2:cccccccc] never recorded" in s for s in audit.stuck)  # acked, still in the holder's PEL
    assert audit.misacknowledged == []  # the digest saw only up to 2 of the missing 1..4
    assert any(f"{DECK_REF} revisions 1..4 never delivered" in loss for loss in audit.losses)
    assert any("written late" in s for s in audit.stale_writes)


def test_revisions_marked_seen_but_never_shown(tmp_path: Path) -> None:
    audit = Audit()
    audit_session(record(["[s1:0:aaaaaaaa]"]), write(tmp_path, clean_session()), audit, {FILE_REF: 2, DECK_REF: 3},
                  digest_seen={DECK_REF: 3})
    assert audit.losses == [] and len(audit.misacknowledged) == 1


def test_torn_state_and_unparsable_lines_are_corrupt(tmp_path: Path) -> None:
    d = write(tmp_path, clean_session())
    with (d / "transcript.jsonl").open("a") as f:
        f.write('{"id": "torn", "parentId": "r1", "type": "mess\n')
    (d / "state.json").write_text('{"panes": [')
    audit = Audit()
    audit_session(record(["[s1:0:aaaaaaaa]"]), d, audit, {FILE_REF: 2, DECK_REF: 1})
    assert len(audit.corrupt) == 2 and audit.files_checked == 1
