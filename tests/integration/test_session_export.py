"""PATCH /sessions/{id} (the title) and GET /sessions/{id}/export against the real services
(docs/architecture.md "Session lifecycle"): a title is validated and listed; an export untars to the
session's files byte for byte, and a hostile workspace (symlinks out, a FIFO, odd names) neither
escapes nor breaks it."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import httpx
import pytest

from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, OTHER_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)


def test_a_title_is_validated_and_listed(api: httpx.Client, module_stack: Stack) -> None:
    sid = api.post("/sessions").json()["id"]
    res = api.patch(f"/sessions/{sid}", json={"title": "  Q3 board deck  "})
    assert res.status_code == 200 and res.json()["title"] == "Q3 board deck"
    listed = {s["id"]: s for s in api.get("/sessions").json()["sessions"]}
    assert listed[sid]["title"] == "Q3 board deck"
    assert api.get(f"/sessions/{sid}").json()["title"] == "Q3 board deck"
    for bad in ("", "   ", "x" * 201, "line\nbreak", "bell\x07", "evil\u202eexe.pdf", "nul\x00",
                # Zero-width and format characters alone, an Arabic letter mark (bidi), blank letters.
                "\u200b", "\u200b\u2060\ufeff", "\u200d\u0301", "evil\u061cexe", "\u3164\u2800", "\U000e0041"):
        refused = api.patch(f"/sessions/{sid}", json={"title": bad})
        assert refused.status_code == 422, (bad, refused.text)
    assert api.patch(f"/sessions/{sid}", json={}).status_code == 422
    assert api.get(f"/sessions/{sid}").json()["title"] == "Q3 board deck"  # unchanged
    bob = httpx.patch(f"{module_stack.url()}/sessions/{sid}", json={"title": "mine"},
                      headers={"Authorization": f"Bearer {OTHER_TOKEN}"})
    assert bob.status_code == 404
    assert api.patch(f"/sessions/{sid}", json={"title": "Ünïcødé 📊 deck"}).json()["title"] == "Ünïcødé 📊 deck"
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # a joined emoji keeps its joiners
    assert api.patch(f"/sessions/{sid}", json={"title": family}).json()["title"] == family
    cleared = api.patch(f"/sessions/{sid}", json={"title": None})
    assert cleared.status_code == 200 and cleared.json()["title"] is None
    assert api.patch("/sessions/s_nosuchsession", json={"title": "x"}).status_code == 404


def hostile_workspace(root: Path, outside: Path) -> dict[str, bytes]:
    """What bash in the sandbox could leave behind; returns the regular files an export must hold."""
    ws = root / "workspace"
    (ws / "deep" / "er").mkdir(parents=True, exist_ok=True)
    files = {"deep/er/data.bin": bytes(range(256)) * 40, "name with\nnewline.txt": b"nl", "-rf": b"dash",
             "..dots..": b"dots"}
    for name, data in files.items():
        (ws / name).write_bytes(data)
    os.symlink("/etc/passwd", ws / "passwd-link")
    os.symlink(outside, ws / "outside-dir")
    os.symlink("../../..", ws / "deep" / "up")
    os.mkfifo(ws / "a-fifo")
    raw = os.fsencode(ws) + b"/latin1-\xe9.txt"
    with open(raw, "wb") as f:
        f.write(b"latin")
    files[os.fsdecode(b"latin1-\xe9.txt")] = b"latin"
    return files


def test_export_round_trip(api: httpx.Client, module_stack: Stack, tmp_path: Path) -> None:
    sid = api.post("/sessions").json()["id"]
    assert api.put(f"/sessions/{sid}/workspace/files/notes/brief.md", content=b"# brief").status_code in (200, 201)
    assert api.put(f"/sessions/{sid}/documents/d0", json={"title": "Deck", "cards": [{"id": "c1"}]}).status_code in (200, 201)
    assert api.post(f"/sessions/{sid}/messages", json={"message": "hello export"}).status_code == 202
    wait_sync(lambda: any("hello export" in e["text"] for e in api.get(f"/sessions/{sid}/preview").json()["transcript"]
                          if e["kind"] == "message_user"), timeout=60, what="the reply")
    wait_sync(lambda: not api.get(f"/sessions/{sid}").json()["running"], timeout=30, what="the run's end")
    assert api.post(f"/sessions/{sid}/suspend").status_code == 200
    assert api.patch(f"/sessions/{sid}", json={"title": "Exported"}).status_code == 200
    root = module_stack.data_dir / "sessions" / sid
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "key.pem").write_bytes(b"SECRET")
    expected = hostile_workspace(root, outside)
    expected["notes/brief.md"] = b"# brief"

    res = api.get(f"/sessions/{sid}/export")
    assert res.status_code == 200, res.text
    assert res.headers["content-type"] == "application/gzip"
    assert int(res.headers["content-length"]) == len(res.content)
    with tarfile.open(fileobj=io.BytesIO(res.content), mode="r:gz") as tar:
        members = tar.getmembers()
        assert all(m.name == sid or m.name.startswith(f"{sid}/") for m in members)
        assert all(m.isfile() or m.isdir() for m in members)  # no link, FIFO or device entry
        assert all(m.mode & 0o7000 == 0 and m.uid == 0 for m in members)
        out = tmp_path / "untarred"
        tar.extractall(out, filter="data")
    got = out / sid
    for name, data in expected.items():
        assert (got / "workspace" / name).read_bytes() == data, name
    ws_names = {str(p.relative_to(got / "workspace")) for p in (got / "workspace").rglob("*") if p.is_file()}
    assert ws_names == set(expected)
    assert b"SECRET" not in res.content and not (got / "workspace" / "outside-dir").exists()
    for name in ("transcript.jsonl", "state.json", "documents/d0.json"):
        assert (got / name).read_bytes() == (root / name).read_bytes(), name
    assert b"hello export" in (got / "transcript.jsonl").read_bytes()
    meta = json.loads((got / "session.json").read_text())
    assert meta["id"] == sid and meta["title"] == "Exported"
    # another user: 404; a too-small limit: 413 (checked on its own stack below)
    assert httpx.get(f"{module_stack.url()}/sessions/{sid}/export",
                     headers={"Authorization": f"Bearer {OTHER_TOKEN}"}).status_code == 404


def test_an_export_over_the_limit_is_413(stack_factory) -> None:
    stack = stack_factory(GAMMA_EXPORT_MAX_BYTES="4096")
    with httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30) as client:
        sid = client.post("/sessions").json()["id"]
        assert client.put(f"/sessions/{sid}/workspace/files/big.bin", content=b"x" * 8000).status_code in (200, 201)
        res = client.get(f"/sessions/{sid}/export")
        assert res.status_code == 413 and "GAMMA_EXPORT_MAX_BYTES" in res.json()["error"]
