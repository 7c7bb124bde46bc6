"""The transcript index (shared/history/transcript_index.py, docs/architecture.md "How a session wakes"): a wake
that reads the index, the window and the lines after it restores what the full read restored, on a
generated history with many compactions and rewinds; a pre-index session gets an index; a stale or
corrupt index is rebuilt; branches read by offset equal the full read's."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from scripted.history import write_history
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from services.runtime.tools.tool_policy import loaded_connectors
from services.runtime.turns.knowledge import loaded_notes
from shared.contracts.records.messages import CustomMessage, TextContent, ToolResultMessage, UserMessage
from shared.contracts.records.transcript import LeafEntry
from shared.history import rewind as rw
from shared.history import scan_apart as apart
from shared.history import transcript_branch as tb
from shared.history import transcript_ids as tid
from shared.history import transcript_index as ix
from shared.history.knowledge import source_id
from shared.history.transcript_branch import read_branch
from shared.history.transcript_scan import iter_lines, read_spans
from shared.history.transcript_tree import path_to
from tests.support.history_reference import assert_same, reference


@pytest.fixture(autouse=True)
def _few_recent_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """The index keeps 48 ids, not 2048: these histories' older ids are in the ids file
    (shared/history/transcript_ids.py), as a long session's are. Rebuilt in this process but where a test
    says otherwise (scan_apart.py: its child keeps its own 2,048)."""
    monkeypatch.setattr(tid, "RECENT_MAX", 48)
    monkeypatch.setattr(apart, "APART_BYTES", 1 << 40)  # rebuilt here, with these 48: a child would keep 2,048


def _history(tmp_path: Path, size: int = 3_000_000, seed: int = 1) -> Path:
    h = write_history(tmp_path / "transcript.jsonl", size, compaction_every=60_000, branch_every=90_000,
                      payload=900, seed=seed)
    assert h.compactions > size // 100_000 and h.rewinds > size // 150_000
    return h.path


def _load(path: Path) -> Transcript:
    return Transcript.load(path, WriteGuard())


def test_a_pre_index_session_wakes_and_gets_an_index(tmp_path: Path) -> None:
    path = _history(tmp_path)
    assert not ix.index_path(path).exists()
    t = _load(path)
    assert_same(t, reference(path))
    index = ix.read_index(path)
    assert index is not None and index.length == path.stat().st_size
    again = ix.load(path)
    assert not again.rebuilt and again.tail == []
    assert len(t.entries) < 40  # the window, not the ~8,000 entries of the file


async def test_appends_after_the_index_are_read_at_the_next_wake(tmp_path: Path) -> None:
    path = _history(tmp_path)
    t = _load(path)
    for i in range(5):
        await t.append_message(UserMessage(content=f"more {i}"), prompt_id=f"late-{i}")
        await t.append_custom(CustomMessage(custom_type="gamma.injection", content="x",
                                            details={"source": "client", "sourceId": f"late-{i}"}))
    woken = ix.load(path)
    assert not woken.rebuilt and len(woken.tail) == 10
    assert_same(_load(path), reference(path))


async def test_a_compaction_moves_the_window_and_writes_the_index(tmp_path: Path) -> None:
    path = _history(tmp_path)
    t = _load(path)
    for i in range(6):
        await t.append_message(UserMessage(content=f"turn {i}"))
    kept = t.entries[-3].id
    await t.append_compaction("summary", kept, 10, {}, "req-late", [CustomMessage(custom_type="gamma.todo_anchor",
                                                                                   content="todo")])
    assert t.entries[0].id == kept
    index = ix.read_index(path)
    assert index is not None and index.length == path.stat().st_size and "req-late" in index.compactions
    assert_same(t, reference(path))
    assert_same(_load(path), reference(path))


@pytest.mark.parametrize("where", ["window", "older"])
async def test_a_leaf_move_follows_the_branch_whether_in_the_window_or_older(tmp_path: Path, where: str) -> None:
    path = _history(tmp_path)
    t = _load(path)
    for i in range(4):
        await t.append_message(UserMessage(content=f"turn {i}"))
    ref = reference(path)
    target = t.entries[-2].id if where == "window" else ref.active[len(ref.active) // 2].id
    await t.move_leaf(target, "rewind", "<session_rewound>x</session_rewound>")
    assert t.leaf_id == target
    assert_same(t, reference(path))
    await t.append_message(UserMessage(content="after the move"))
    assert_same(t, reference(path))
    assert_same(_load(path), reference(path))
    assert ix.read_index(path) is not None


def test_a_stale_or_corrupt_index_is_rebuilt(tmp_path: Path) -> None:
    path = _history(tmp_path, 1_000_000)
    _load(path)
    good = ix.index_path(path).read_bytes()
    ix.index_path(path).write_bytes(good[: len(good) // 2])  # torn (never by our writer: another's)
    assert ix.read_index(path) is None and ix.load(path).rebuilt
    ix.index_path(path).write_bytes(good.replace(b'"version":2', b'"version":9'))
    assert ix.read_index(path) is None
    ix.index_path(path).write_bytes(good)
    raw = path.read_bytes()
    last = raw.rindex(b"\n", 0, len(raw) - 1) + 1
    path.write_bytes(raw[:last] + raw[last:].replace(b'"id":"', b'"id":"x', 1)[:-2] + b"\n")  # its last line rewritten
    assert ix.read_index(path) is None
    assert_same(_load(path), reference(path))
    ix.index_path(path).write_bytes(good)
    path.write_bytes(raw[: len(raw) - 5000])  # cut short
    assert ix.read_index(path) is None
    assert_same(_load(path), reference(path))


def test_branches_read_by_offset_equal_the_full_read(tmp_path: Path) -> None:
    path = _history(tmp_path)
    ref = reference(path)
    rng = random.Random(3)
    nodes = [e for e in ref.entries if not isinstance(e, LeafEntry)]
    for target in [*rng.sample(nodes, 25), nodes[0], nodes[-1]]:
        full = path_to(ref.entries, target.id)
        branch = read_branch(path, target.id)
        assert branch is not None and not branch.partial
        assert branch.nodes == rw._nodes(full)
        assert branch.tail == full[len(full) - len(branch.tail):]
        assert rw.unanswered_calls(branch.tail) == rw.unanswered_calls(full)
    assert read_branch(path, "nosuchid") is None
    leaf_move = next(e for e in ref.entries if isinstance(e, LeafEntry))
    assert read_branch(path, leaf_move.id) is None  # a leaf move is not a node


def test_slices_cut_lines_nowhere(tmp_path: Path) -> None:
    path = _history(tmp_path, 400_000)
    whole = path.read_bytes()
    lines = [(off, line) for off, line in iter_lines(path, size=4096)]  # lines longer than the slice
    assert b"\n".join(line for _, line in lines) + b"\n" == whole
    assert all(whole[off: off + len(line)] == line for off, line in lines)
    assert read_spans(path, [(off, len(line)) for off, line in lines[::7]], size=5000) == [line for _, line in lines[::7]]
    mid = len(whole) // 2
    assert next(iter_lines(path, mid - 10, mid))[1] == whole[mid - 10: whole.index(b"\n", mid - 10)]
    path.write_bytes(whole + b'{"type":"message","id":"torn')  # a crash in the middle of an append
    assert list(iter_lines(path, size=4096)) == lines


async def test_a_compaction_kept_from_a_leaf_move_is_found_by_the_rebuild_too(tmp_path: Path) -> None:
    path = _history(tmp_path, 500_000)
    t = _load(path)
    await t.append_message(UserMessage(content="one"))
    await t.append_message(UserMessage(content="two"))
    move = await t.move_leaf(t.entries[-2].id, "rewind", "<session_rewound>x</session_rewound>")
    await t.append_message(UserMessage(content="three"))
    await t.append_compaction("summary", move.id, 10, {}, "req-move", [])
    assert t.entries[0].id == move.id
    ref = reference(path)
    assert_same(t, ref)
    ix.index_path(path).unlink()
    assert_same(_load(path), ref)


async def test_a_duplicate_older_than_the_window_is_still_known_after_a_wake(tmp_path: Path) -> None:
    """Exactly-once across wakes: a prompt id or an injection source recorded before the latest
    compaction's cut is not in the window, yet a wake still knows it (dispatcher.py `on_prompt` acks
    a redelivered prompt it finds in `Transcript.prompts`; injections check `Transcript.sources`),
    whether the wake reads the index or rebuilds it."""
    path = _history(tmp_path, 1_000_000)
    t = _load(path)
    await t.append_message(UserMessage(content="early"), prompt_id="dup-prompt")
    await t.append_custom(CustomMessage(custom_type="gamma.injection", content="x",
                                        details={"source": "client", "sourceId": "dup-source"}))
    early = {t.prompts["dup-prompt"], t.sources[("client", "dup-source")]}
    for i in range(6):
        await t.append_message(UserMessage(content=f"turn {i}"), prompt_id=f"after-{i}")
    await t.append_compaction("summary", t.entries[-2].id, 10, {}, "req-cut", [])
    for rebuilt in (False, True):
        if rebuilt:
            ix.index_path(path).unlink()
        woken = _load(path)
        assert not early & {e.id for e in woken.entries}  # older than the window
        assert "dup-prompt" in woken.prompts and ("client", "dup-source") in woken.sources
        assert {woken.prompts["dup-prompt"], woken.sources[("client", "dup-source")]} == early
        assert "req-cut" in woken.compactions
    first = next(line for _, line in iter_lines(path) if b'"promptId"' in line)  # the oldest prompt of the file
    oldest = first.split(b'"promptId":"', 1)[1].split(b'"', 1)[0].decode()
    assert oldest in _load(path).prompts


def _loaded(t: Transcript) -> tuple[dict[str, int], set[str]]:
    return loaded_connectors(t.loads), set(loaded_notes(t.loads))


async def test_loads_cut_by_a_compaction_stay_in_force_after_it_and_after_a_wake(tmp_path: Path) -> None:
    """A connector and a note loaded before the window stay loaded (shared/history/transcript_index.py
    `keep_loads`): live after the compaction, at a wake from the index, and after a rebuild; a note
    retired by a newer workspace_update before the window stays retired."""
    path = tmp_path / "transcript.jsonl"
    t = _load(path)
    await t.append_message(UserMessage(content="start"))
    await t.append_message(ToolResultMessage(tool_call_id="c1", tool_name="load_tools", content=[TextContent(text="ok")],
                                             details={"namespace": "connector:crm", "connector": "crm", "version": 2}))
    for note, rev in (("kept", 1), ("old", 1)):
        await t.append_message(ToolResultMessage(tool_call_id=f"r-{note}", tool_name="read_workspace_rule",
                                                 content=[TextContent(text="body")],
                                                 details={"knowledgeId": note, "revision": rev, "name": note}))
    await t.append_custom(CustomMessage(custom_type="gamma.workspace_update", content="changed", details={
        "injectionType": "workspace_update", "source": "system", "sourceId": source_id("old", 2)}))
    for i in range(4):
        await t.append_message(UserMessage(content=f"turn {i}"))
    await t.append_compaction("summary", t.entries[-2].id, 10, {}, "req-cut", [])
    assert not any(getattr(e, "message", None) and e.message.role == "toolResult" for e in t.entries)  # type: ignore[union-attr]
    expected = ({"crm": 2}, {"kept"})
    assert _loaded(t) == expected
    assert _loaded(_load(path)) == expected
    ix.index_path(path).unlink()
    assert _loaded(_load(path)) == expected


def test_a_long_transcript_is_rebuilt_in_a_child_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `APART_BYTES` the scan runs in a child (scan_apart.py): this process never scans, its
    GIL stays with the event loop; the index the child wrote is the one a scan here writes."""
    path = _history(tmp_path, 400_000)
    expected = ix.rebuild(path, persist=False)
    monkeypatch.setattr(apart, "APART_BYTES", 100_000)

    def no_scan(*_: object, **__: object) -> None:
        raise AssertionError("scanned in the waking process")

    monkeypatch.setattr(ix, "scan", no_scan)
    loaded = ix.load(path)
    assert loaded.rebuilt
    assert loaded.index.window == expected.window and loaded.index.length == path.stat().st_size
    assert loaded.index.facts().prompts.keys() <= expected.facts().prompts.keys()
    assert not ix.load(path).rebuilt


def test_a_failed_child_rebuild_falls_back_to_the_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _history(tmp_path, 400_000)
    monkeypatch.setattr(apart, "APART_BYTES", 100_000)
    monkeypatch.setattr(apart, "INDEX_CHILD", "shared.history.no_such_module")
    loaded = ix.load(path)
    assert loaded.rebuilt and ix.read_index(path) == loaded.index


def test_a_long_branch_is_read_in_a_child_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewind to an entry older than the window reads its branch by one scan: past `APART_BYTES`, in a
    child (scan_apart.py), whose branch is the one a scan here finds."""
    path = _history(tmp_path, 400_000)
    target = ix.rebuild(path, persist=False)
    assert target.window
    entry = next(e.id for line in read_spans(path, target.window[:1]) if (e := ix.parse_entry(ix.parse_line(line) or {})))
    expected = read_branch(path, entry)
    monkeypatch.setattr(apart, "APART_BYTES", 100_000)

    def no_scan(*_: object, **__: object) -> None:
        raise AssertionError("scanned in this process")

    monkeypatch.setattr(tb, "timed_scan", no_scan)
    assert tb.read_branch_apart(path, entry) == expected
    assert tb.read_branch_apart(path, "no-such-entry") is None
