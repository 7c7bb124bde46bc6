"""The tool policy's scan of the loads (services/runtime/tools/tool_policy.py `LoadScan`): before every
model call it is asked again for a new list of the same window, and carries its result over what was
appended since, scanning only that; a compaction's new window, or any list whose first or last-seen entry
is not the one scanned, is scanned again in full. Its answers are those of a scan from the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from services.runtime.tools import tool_policy
from services.runtime.tools.tool_policy import LoadScan, active_namespaces, loaded_connectors
from shared.contracts.records.messages import TextContent, ToolResultMessage, UserMessage
from shared.contracts.records.transcript import MessageEntry, TranscriptEntry


def load_result(call: str, **details: object) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call, tool_name="load_tools", content=[TextContent(text="ok")],
                             details=details)


async def test_the_scan_takes_only_what_was_appended_and_answers_as_a_full_one(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[object] = []
    real = LoadScan._take

    def take(self: LoadScan, e: TranscriptEntry) -> None:
        taken.append(e)
        real(self, e)

    monkeypatch.setattr(LoadScan, "_take", take)
    t = Transcript.load(tmp_path / "transcript.jsonl", WriteGuard())
    scan = LoadScan()
    await t.append_message(UserMessage(content="start"))
    await t.append_message(load_result("c1", namespace="connector:crm", connector="crm", version=2))
    for i in range(30):
        await t.append_message(UserMessage(content=f"turn {i}"))
    assert scan.update(t.loads).connectors == {"crm": 2} and len(taken) == 32
    await t.append_message(load_result("c2", namespace="gamma"))
    await t.append_skill("deck-generation", "workflow", None)
    await t.append_message(load_result("c3", namespace="connector:crm", connector="crm", version=3))
    taken.clear()
    scan.update(t.loads)
    assert len(taken) == 3  # before: the 35 entries of the window at every model call
    assert (scan.namespaces, scan.connectors) == ({"core", "gamma"}, {"crm": 3})
    monkeypatch.setattr(LoadScan, "_take", real)
    assert (scan.namespaces, scan.connectors) == (active_namespaces(t.loads), loaded_connectors(t.loads))

    await t.append_compaction("summary", t.entries[-2].id, 10, {}, "req-1", [])  # a new window
    assert scan.update(t.loads).connectors == loaded_connectors(t.loads) == {"crm": 3}
    assert scan.namespaces == active_namespaces(t.loads)


def test_a_list_that_is_not_the_scanned_one_grown_is_scanned_again() -> None:
    def entry(message: ToolResultMessage | UserMessage) -> MessageEntry:
        return MessageEntry(id=f"e{id(message)}", parent_id=None, timestamp="2026-01-01T00:00:00Z", message=message)

    loaded, other = entry(load_result("c1", connector="crm", version=1)), entry(UserMessage(content="x"))
    scan = LoadScan()
    assert scan.update([loaded, other]).connectors == {"crm": 1}
    assert scan.update([other, other, other]).connectors == {}  # a rewind: another branch in its place
    assert scan.update([]).connectors == {} and scan.update([loaded]).connectors == {"crm": 1}
    assert tool_policy.loaded_connectors([other]) == {}
