"""What counts as the agent having read a deck revision (services/runtime/store/document_reads.py), over a
real transcript: show_gamma reads and the agent's own writes count, errors and digests do not."""

from __future__ import annotations

from pathlib import Path

from services.runtime.store.document_reads import DocumentReads, reads_in, stale_write
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.messages import CustomMessage, TextContent, ToolResultMessage


async def no_guard() -> None:
    return None


def show(revision: int, *, error: bool = False, ari: str = "gamma:file:d1") -> ToolResultMessage:
    return ToolResultMessage(tool_call_id="c", tool_name="show_gamma", content=[TextContent(text="x")],
                             details={"ari": ari, "revision": revision}, is_error=error)


async def test_reads_and_own_writes_count_errors_and_digests_do_not(tmp_path: Path) -> None:
    t = Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard))
    await t.ensure_header()
    await t.append_message(show(1))  # a read
    await t.append_message(show(2))  # its own write
    await t.append_message(show(5, error=True))  # a refused write names the stored revision: not read
    await t.append_message(show(7, ari="gamma:file:other"))
    await t.append_custom(CustomMessage(custom_type="gamma.artifact_update", content="<artifact_update/>", details={
        "injectionType": "artifact_update", "ref": "gamma:file:d1", "toRevision": 4, "source": "artifact",
        "sourceId": "gamma:file:d1@4"}))
    assert reads_in(t.entries) == {"gamma:file:d1": 2, "gamma:file:other": 7}
    reads = DocumentReads(lambda: Transcript.load(tmp_path / "t.jsonl", WriteGuard(no_guard)).entries)  # after a wake
    assert reads.revision("gamma:file:d1") == 2 and reads.revision("gamma:file:none") is None
    reads.saw("gamma:file:d1", 3)  # a result made in this run, not recorded yet
    assert reads.revision("gamma:file:d1") == 3


def test_only_the_revision_read_lets_a_write_through() -> None:
    assert stale_write("gamma:file:d1", "d1", 3, 3) is None
    newer = stale_write("gamma:file:d1", "d1", 4, 3)
    assert newer is not None and "revision 4" in newer and "last revision you read is 3" in newer
    assert "show_gamma with only doc='d1'" in newer
    older = stale_write("gamma:file:d1", "d1", 1, 3)  # deleted and created again by the user
    assert older is not None and "revision 1" in older
    never = stale_write("gamma:file:d1", "d1", 2, None)
    assert never is not None and "you have not read it in this session" in never
