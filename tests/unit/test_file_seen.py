"""What the agent saw of the workspace files before the transcript's window (shared/storage/file_seen.py): a
compaction or a wake keeps it, so a file it read or wrote before is not refused as unread after."""

from __future__ import annotations

from typing import Any

from services.runtime.store.file_reads import FileReads
from shared.storage.file_seen import fold_seen, seen_change


def result(tool: str, details: dict[str, Any], error: bool = False) -> dict[str, Any]:
    return {"type": "message", "message": {"role": "toolResult", "toolName": tool, "toolCallId": "c",
                                           "content": [], "details": details, "isError": error}}


def test_reads_writes_and_commands_fold_in_order() -> None:
    seen: dict[str, str] = {}
    for d in (result("write", {"path": "./decks//a.json", "sha256": "1"}), result("read", {"path": "b.md", "sha256": "2"}),
              result("bash", {"files": {"a.json": None, "c.txt": "3"}}),
              result("write", {"path": "b.md", "sha256": "9"}, error=True),  # refused: nothing seen
              result("read", {"path": "s/SKILL.md", "sha256": "4", "skill": "x"})):  # a skill's file
        if (change := seen_change(d)) is not None:
            fold_seen(seen, change)
    assert seen == {"decks/a.json": "1", "b.md": "2", "c.txt": "3"}
    assert seen_change({"type": "message", "message": {"role": "assistant"}}) is None


def test_file_reads_start_from_what_was_seen_before_the_window() -> None:
    reads = FileReads(lambda: [], lambda: {"brief.xml": "abc"})
    assert reads.refusal("brief.xml", "abc") is None
    unread = reads.refusal("deck.json", "def")
    assert unread is not None and "you have not read it" in unread
