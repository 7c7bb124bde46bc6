"""The ids file (shared/history/transcript_ids.py, docs/architecture.md "How a session wakes"): every id merged is
found with its entry and no other is; a session whose index predates the file wakes without a rebuild
and its ids move there; a missing, corrupt, stale or short ids file rebuilds the index, one that
describes more than the index counts on (a crash between their writes) is kept; a live session holds
only the ids folded since the file, and a duplicate from long ago is still recognised."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from scripted.history import write_history
from services.runtime.store.transcript import Transcript
from services.runtime.store.write_guard import WriteGuard
from shared.contracts.records.messages import CustomMessage, UserMessage
from shared.history import transcript_ids as tid
from shared.history import transcript_index as ix
from tests.support.history_reference import assert_knows, assert_same, reference


@pytest.fixture(autouse=True)
def _few_recent_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tid, "RECENT_MAX", 48)


def _one_line(tmp_path: Path) -> tuple[Path, int, tuple[int, int], str]:
    path = tmp_path / "transcript.jsonl"
    line = b'{"type":"session","id":"h"}'
    path.write_bytes(line + b"\n")
    return path, len(line) + 1, (0, len(line)), ix.line_hash(line)


@pytest.mark.parametrize("sizes", [[0], [1], [127, 1, 128], [129, 700], [3000, 5, 2000]])
def test_every_id_merged_is_found_with_its_entry_and_no_other(tmp_path: Path, sizes: list[int]) -> None:
    path, length, last, digest = _one_line(tmp_path)
    rng = random.Random(sum(sizes))
    kept: dict[bytes, str] = {}
    for batch, n in enumerate(sizes):
        items = [(tid.prompt_key(f"p{batch}-{i}"), f"{rng.getrandbits(32):08x}") for i in range(n)]
        tid.merge(path, items, length, last, digest, keep=batch > 0)
        kept.update(items)
    header = tid.read_header(path)
    assert header is not None and header.count == len(kept) and header.length == length
    ids = tid.IdFile(tid.ids_path(path))
    assert all(ids.get(k) == e for k, e in kept.items())
    assert all(ids.get(tid.prompt_key(f"absent-{i}")) is None for i in range(200))


def test_a_key_merged_again_keeps_its_first_entry(tmp_path: Path) -> None:
    path, length, last, digest = _one_line(tmp_path)
    tid.merge(path, [(tid.prompt_key("p"), "first")], length, last, digest, keep=False)
    tid.merge(path, [(tid.prompt_key("p"), "second"), (tid.prompt_key("q"), "q")], length, last, digest, keep=True)
    ids = tid.IdFile(tid.ids_path(path))
    assert (ids.get(tid.prompt_key("p")), ids.get(tid.prompt_key("q"))) == ("first", "q")


def test_hostile_ids_neither_collide_nor_break_the_file(tmp_path: Path) -> None:
    """Parts are length-prefixed (no separator an id can forge); entry ids of any length and text."""
    assert tid.source_key(("a", "b:c")) != tid.source_key(("a:b", "c"))
    assert tid.source_key(("a\x00", "b")) != tid.source_key(("a", "\x00b"))
    assert tid.prompt_key("x") != tid.compaction_key("x")
    path, length, last, digest = _one_line(tmp_path)
    entries = {tid.source_key(("client", "é\x00\ud800")): "e" * 500, tid.source_key(("s", "")): "",
               tid.prompt_key("p" * 10_000): "ü" * 19, tid.prompt_key("short"): "x" * 19}
    tid.merge(path, list(entries.items()), length, last, digest, keep=False)
    tid.merge(path, [(tid.prompt_key("later"), "y" * 64)], length, last, digest, keep=True)
    ids = tid.IdFile(tid.ids_path(path))
    assert all(ids.get(k) == e for k, e in {**entries, tid.prompt_key("later"): "y" * 64}.items())


def _history(tmp_path: Path, size: int = 1_200_000) -> Path:
    return write_history(tmp_path / "transcript.jsonl", size, compaction_every=60_000, branch_every=90_000,
                         payload=900, seed=5).path


def test_a_session_indexed_before_the_ids_file_wakes_without_a_rebuild(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _history(tmp_path)
    monkeypatch.setattr(tid, "RECENT_MAX", 1 << 30)
    index = ix.rebuild(path)  # every id in the index, as the first version wrote it
    old = json.loads(index.model_dump_json(exclude={"ids_length"}))
    ix.index_path(path).write_text(json.dumps({**old, "version": 1, "branch_points": {"a": ["b", "c"]}}))
    monkeypatch.setattr(tid, "RECENT_MAX", 48)
    loaded = ix.load(path)
    assert not loaded.rebuilt and loaded.older is not None
    moved = ix.read_index(path)
    assert moved is not None and moved.version == 2 and moved.recent() == 0 and moved.ids_length == moved.length
    assert_same(Transcript.load(path, WriteGuard()), reference(path))


async def test_an_ids_file_missing_corrupt_stale_or_short_rebuilds_and_a_longer_one_is_kept(tmp_path: Path) -> None:
    path = _history(tmp_path)
    t = Transcript.load(path, WriteGuard())
    ids = tid.ids_path(path)
    before = (ix.index_path(path).read_bytes(), ids.read_bytes())
    for i in range(60):  # past RECENT_MAX: the next compaction moves them to a new ids file
        await t.append_message(UserMessage(content=f"more {i}"), prompt_id=f"more-{i}")
    await t.append_compaction("summary", t.entries[-2].id, 10, {}, "req-more", [])
    after = (ix.index_path(path).read_bytes(), ids.read_bytes())
    assert after[1] != before[1]
    ref = reference(path)
    ix.index_path(path).write_bytes(before[0])  # a crash after the new ids file, before its index: kept
    assert not ix.load(path).rebuilt
    assert_same(Transcript.load(path, WriteGuard()), ref)
    cases = {"missing": None, "short": after[1][:-40], "corrupt": b"x" + after[1][1:], "older": before[1],
             "stale": after[1].replace(after[1][48:56], bytes(8), 1)}  # the last line's hash changed
    for case, content in cases.items():
        ix.index_path(path).write_bytes(after[0])
        ids.unlink(missing_ok=True)
        if content is not None:
            ids.write_bytes(content)
        assert ix.load(path).rebuilt, case
        assert_same(Transcript.load(path, WriteGuard()), ref)


async def test_a_live_session_holds_only_the_ids_since_the_file_and_knows_the_oldest(tmp_path: Path) -> None:
    path = _history(tmp_path)
    t = Transcript.load(path, WriteGuard())
    await t.append_message(UserMessage(content="first"), prompt_id="dup-prompt")
    await t.append_custom(CustomMessage(custom_type="gamma.injection", content="x",
                                        details={"source": "client", "sourceId": "dup-source"}))
    for n in range(1, 301):
        await t.append_message(UserMessage(content=f"turn {n}"), prompt_id=f"live-{n}")
        if n % 20 == 0:
            await t.append_compaction(f"summary {n}", t.entries[-2].id, 10, {}, f"req-live-{n}", [])
            assert len(t.w.facts.prompts) + len(t.w.facts.sources) + len(t.w.facts.compactions) < 48 + 21
    woken = Transcript.load(path, WriteGuard())
    for live in (t, woken):
        assert "dup-prompt" in live.prompts and ("client", "dup-source") in live.sources
        assert "prompt-1" in live.prompts and "req-live-20" in live.compactions
        assert "live-301" not in live.prompts
    assert_knows(woken, reference(path).facts)
