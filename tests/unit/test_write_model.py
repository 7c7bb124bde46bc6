"""The one write model (shared/ui/write_model.py) the proxy applies while a session is dormant and the
runtime while it is live: real files under tmp_path, every refusal leaves the disk as it was."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pycrdt import Map

from shared.contracts.records.documents import StoredDeck
from shared.storage.disk import session_paths
from shared.storage.quota import WorkspaceQuota
from shared.ui import write_model as w
from shared.ui.uidoc import ROOT, copy_doc, doc_from_snapshot, to_shared
from shared.ui.uirules import UiLimits, default_snapshot

QUOTA = WorkspaceQuota(max_bytes=1000, max_files=3)


def _paths(tmp_path: Path) -> w.SessionPaths:
    paths = session_paths(tmp_path, "s_write")
    paths.workspace.mkdir(parents=True)
    paths.documents.mkdir(parents=True)
    return paths


def test_file_write_creates_with_directories_and_says_so(tmp_path: Path) -> None:
    ws = _paths(tmp_path).workspace
    missing = w.write_file(ws, "new.txt", b"x", max_bytes=100, quota=QUOTA, must_exist=True)
    assert isinstance(missing, w.Refused) and missing.status == 404 and not (ws / "new.txt").exists()
    made = w.write_file(ws, "dir/sub/new.txt", b"hello", max_bytes=100, quota=QUOTA)
    assert made == w.FileWritten(path="dir/sub/new.txt", size=5, created=True)
    assert (ws / "dir/sub/new.txt").read_bytes() == b"hello"
    again = w.write_file(ws, "dir/sub/new.txt", b"bye", max_bytes=100, quota=QUOTA, must_exist=True)
    assert again == w.FileWritten(path="dir/sub/new.txt", size=3) and (ws / "dir/sub/new.txt").read_bytes() == b"bye"


def test_never_woken_session_gets_its_workspace_on_the_first_write(tmp_path: Path) -> None:
    ws = session_paths(tmp_path, "s_fresh").workspace  # nothing of the session exists on disk yet
    made = w.write_file(ws, "in/brief.xml", b"<brief/>", max_bytes=100, quota=QUOTA)
    assert made == w.FileWritten(path="in/brief.xml", size=8, created=True) and (ws / "in/brief.xml").is_file()


def test_remove_file_removes_files_and_links_but_not_directories(tmp_path: Path) -> None:
    ws = _paths(tmp_path).workspace
    (ws / "d").mkdir()
    (ws / "d/a.txt").write_bytes(b"a")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep")
    (ws / "link").symlink_to(outside)
    assert w.remove_file(ws, "d/a.txt") == w.Removed(path="d/a.txt") and not (ws / "d/a.txt").exists()
    assert w.remove_file(ws, "link") == w.Removed(path="link") and outside.read_bytes() == b"keep"
    (ws / "d/b.txt").write_bytes(b"b")
    for path, status in (("d/a.txt", 404), ("nodir/a.txt", 404), ("d", 409), ("../outside.txt", 400),
                         ("d/b.txt/x", 409), ("", 400)):
        got = w.remove_file(ws, path)
        assert isinstance(got, w.Refused) and got.status == status, (path, got)
    assert (ws / "d/b.txt").read_bytes() == b"b" and outside.exists()
    (ws / "esc").symlink_to(tmp_path)  # a directory link out of the workspace is never walked through
    got = w.remove_file(ws, "esc/outside.txt")
    assert isinstance(got, w.Refused) and got.status == 400 and outside.exists()


def test_delete_document_checks_if_match(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    w.edit_document(paths, "d1", "put", {"title": "T"}, None)
    w.edit_document(paths, "d1", "put", {"title": "U"}, None)
    stale = w.delete_document(paths, "d1", 1)
    assert isinstance(stale, w.Refused) and stale.status == 409 and paths.document("d1").exists()
    assert w.delete_document(paths, "d1", 2) == w.Removed(path="d1", revision=2)
    assert not paths.document("d1").exists()
    gone = w.delete_document(paths, "d1", None)
    assert isinstance(gone, w.Refused) and gone.status == 404
    bad = w.delete_document(paths, "../x", None)
    assert isinstance(bad, w.Refused) and bad.status == 400


def test_file_write_refusals_change_nothing(tmp_path: Path) -> None:
    ws = _paths(tmp_path).workspace
    (ws / "a.txt").write_bytes(b"seed")
    for path, data, status in (("a.txt", b"y" * 101, 413), ("../out.txt", b"x", 400), ("a.txt/b", b"x", 409),
                               ("big.txt", b"z" * 99, 201)):
        got = w.write_file(ws, path, data, max_bytes=100, quota=WorkspaceQuota(max_bytes=50, max_files=3),
                           must_exist=False)
        if status == 201:
            assert isinstance(got, w.Refused) and got.status == 507, got  # over the byte quota
        else:
            assert isinstance(got, w.Refused) and got.status == status, (path, got)
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt"] and (ws / "a.txt").read_bytes() == b"seed"
    assert not (tmp_path / "sessions" / "s_write" / "out.txt").exists()


def _deck(paths: w.SessionPaths, doc: str) -> dict[str, object]:
    return json.loads(paths.document(doc).read_text())


def test_document_put_patch_and_revision(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    first = w.edit_document(paths, "d1", "put", {"title": "T", "cards": [{"id": "c1", "text": "a"}]}, None,
                            create=True)
    assert isinstance(first, StoredDeck) and first.revision == 1 and _deck(paths, "d1")["revision"] == 1
    patched = w.edit_document(paths, "d1", "patch", {"cards": [{"id": "c1", "text": "b"}, {"id": "c2"}]}, 1,
                              create=False)
    assert isinstance(patched, StoredDeck) and patched.revision == 2
    assert [c.model_dump() for c in patched.cards] == [{"id": "c1", "text": "b"}, {"id": "c2"}]
    assert _deck(paths, "d1") == patched.model_dump(mode="json")


def test_document_refusals_change_nothing(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    w.edit_document(paths, "d1", "put", {"title": "T"}, None, create=True)
    before = paths.document("d1").read_bytes()
    stale = w.edit_document(paths, "d1", "put", {"title": "U"}, 7, create=True)
    assert isinstance(stale, w.Refused) and stale.status == 409 and stale.body()["revision"] == 1
    bad = w.edit_document(paths, "d1", "patch", {"cards": [{"no": "id"}]}, None, create=False)
    assert isinstance(bad, w.Refused) and bad.status == 422
    not_created = w.edit_document(paths, "d2", "put", {"title": "N"}, None, create=False)
    assert isinstance(not_created, w.Refused) and not_created.status == 404
    live_patch_new = w.edit_document(paths, "d3", "patch", {"title": "N"}, None, create=True)
    assert isinstance(live_patch_new, w.Refused) and live_patch_new.status == 404
    bad_id = w.edit_document(paths, "../x", "put", {}, None, create=True)
    assert isinstance(bad_id, w.Refused) and bad_id.status == 400
    assert paths.document("d1").read_bytes() == before
    assert sorted(p.name for p in paths.documents.iterdir()) == ["d1.json"]
    paths.document("d4").write_text("{not json")
    torn = w.edit_document(paths, "d4", "put", {"title": "N"}, None, create=True)
    assert isinstance(torn, w.Refused) and torn.status == 409 and paths.document("d4").read_text() == "{not json"


def test_decode_update_accepts_unpadded_and_refuses_garbage() -> None:
    assert w.decode_update("AAA") == b"\x00\x00"
    assert w.decode_update(" AA\nA= ") == b"\x00\x00"
    bad = w.decode_update("not base64!")
    assert isinstance(bad, w.Refused) and bad.status == 400


def test_stored_ui_sync_merges_validates_and_refuses(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    limits = UiLimits()
    stored = default_snapshot()
    changed = {**stored, "expandedDirs": ["notes"], "mobile": {"view": "files", "filePaneOpen": True}}
    client = copy_doc(doc_from_snapshot(stored).get_update(), 4242)  # a client that synced the stored state
    before_edit = client.get_state()
    client.get(ROOT, type=Map)["expandedDirs"] = to_shared(["notes"])
    client.get(ROOT, type=Map)["mobile"] = to_shared(changed["mobile"])
    update = client.get_update(before_edit)
    merged = asyncio.run(w.sync_stored_ui(paths, stored, update, None, limits))
    assert isinstance(merged, dict) and merged["expandedDirs"] == ["notes"] and merged["mobile"]["view"] == "files"
    assert json.loads(paths.state.read_text()) == merged
    replaced = asyncio.run(w.sync_stored_ui(paths, stored, update, changed, limits))
    assert replaced == changed and json.loads(paths.state.read_text()) == changed
    before = paths.state.read_bytes()
    bad = asyncio.run(w.sync_stored_ui(paths, stored, b"\xff\xff\xff", None, limits))
    assert isinstance(bad, w.Refused) and bad.status == 400 and paths.state.read_bytes() == before
