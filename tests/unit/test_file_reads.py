"""What the agent last saw of each file (services/runtime/store/file_reads.py): derived from the recorded
results, updated as results are made, and the refusal a write of a changed or unread file gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.runtime.store.file_reads import FileReads, altered_by_others, canonical, seen_in, sha256, stale
from shared.contracts.records.messages import TextContent, ToolResultMessage
from shared.contracts.records.transcript import CustomMessageEntry, MessageEntry, TranscriptEntry


def result(tool: str, details: dict[str, Any], error: bool = False, n: int = 0) -> MessageEntry:
    msg = ToolResultMessage(tool_call_id=f"c{n}", tool_name=tool, content=[TextContent(text="ok")],
                            details=details, is_error=error)
    return MessageEntry(id=f"e{n}", timestamp="2026-01-01T00:00:00Z", message=msg)


def update(ref: str, source: str, to: int) -> CustomMessageEntry:
    return CustomMessageEntry(id="u1", timestamp="2026-01-01T00:00:00Z", custom_type="gamma.artifact_update",
                              content="<artifact_update>x</artifact_update>",
                              details={"injectionType": "artifact_update", "ref": ref, "source": source,
                                       "toRevision": to})


def test_seen_comes_from_reads_writes_edits_and_commands() -> None:
    a, b = sha256(b"a"), sha256(b"b")
    entries: list[TranscriptEntry] = [
        result("read", {"path": "./brief.xml", "sha256": a}, n=1),
        result("write", {"path": "deck.json", "sha256": a}, n=2),
        result("edit", {"path": "deck.json", "sha256": b}, n=3),
        result("read", {"path": "checklist.yaml", "sha256": a, "skill": "import"}, n=4),  # a skill's file
        result("write", {"path": "x.txt", "sha256": a}, error=True, n=5),  # refused: not seen
        result("bash", {"files": {"out.png": b, "deck.json": None}}, error=True, n=6),  # a failing command still wrote
    ]
    assert seen_in(entries) == {"brief.xml": a, "out.png": b}
    assert canonical("a//b/./c") == "a/b/c" and canonical("../x") is None


def test_a_changed_or_unread_file_is_refused_naming_the_change() -> None:
    entries: list[TranscriptEntry] = [result("read", {"path": "brief.xml", "sha256": sha256(b"v1")}, n=1)]
    reads = FileReads(lambda: entries)
    assert reads.refusal("brief.xml", sha256(b"v1")) is None  # unchanged
    assert reads.refusal("new.txt", None) is None  # nothing to overwrite
    unread = reads.refusal("notes.md", sha256(b"theirs"))
    assert unread is not None and "you have not read it" in unread
    entries.append(update("file:brief.xml", "artifact", 7))
    changed = reads.refusal("brief.xml", sha256(b"v2"))
    assert changed is not None and "the user or a collaborator changed it (revision 7" in changed
    reads.client_saved("brief.xml", 8)  # a live save the runtime applied names itself
    assert "saved it (revision 8)" in (reads.refusal("brief.xml", sha256(b"v3")) or "")
    reads.saw("brief.xml", sha256(b"v3"))  # read again: the write goes on
    assert reads.refusal("brief.xml", sha256(b"v3")) is None
    reads.saw("imports/out.json", sha256(b"old"))
    entries.append(update("file:imports/out.json", "notification", 2))
    assert "a service changed it (revision 2" in (reads.refusal("imports/out.json", sha256(b"new")) or "")


def test_a_command_names_the_files_it_altered_that_others_changed(tmp_path: Path) -> None:
    (tmp_path / "brief.xml").write_text("theirs")
    (tmp_path / "mine.txt").write_text("mine")
    reads = FileReads(lambda: [])
    reads.saw("brief.xml", sha256(b"mine before"))
    reads.saw("mine.txt", sha256(b"mine"))
    before = stale(tmp_path, reads, reads.recent())
    assert before == {"brief.xml"}
    others = altered_by_others(["brief.xml", "mine.txt", "upload.pptx", "fresh.txt"], {"brief.xml", "mine.txt",
                               "upload.pptx"}, before, reads)
    assert others == ["brief.xml (its content is not what you last read or wrote)", "upload.pptx (you had not read it)"]
