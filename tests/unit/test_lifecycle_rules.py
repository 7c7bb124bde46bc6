"""The pure rules of the session lifecycle: the Idempotency-Key fingerprint and key syntax, title
validation, the export's walk of a hostile workspace, the cancelled request's estimated usage."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.proxy.dormant.export import ExportTooLarge, build
from services.proxy.idempotency import fingerprint, valid_key
from services.runtime.model.openai_stream import estimated_usage
from shared.contracts.http import PatchSession


def test_the_fingerprint_is_of_the_canonical_request() -> None:
    a = fingerprint("POST", "/sessions/s_1/messages", b'{"message": "hi", "on_busy": "steer"}')
    assert a == fingerprint("POST", "/sessions/s_1/messages", b'{\n  "on_busy":"steer",\n  "message":"hi"}')
    assert a != fingerprint("POST", "/sessions/s_1/messages", b'{"message": "hi!", "on_busy": "steer"}')
    assert a != fingerprint("POST", "/sessions/s_2/messages", b'{"message": "hi", "on_busy": "steer"}')
    assert fingerprint("POST", "/sessions", b"") != fingerprint("POST", "/sessions", b"{}")
    assert fingerprint("POST", "/x", b"not json") == fingerprint("POST", "/x", b"not json")
    # the parts are length-prefixed: moving bytes between path and body changes the fingerprint
    assert fingerprint("POST", "/ab", b"c") != fingerprint("POST", "/a", b"bc")


@pytest.mark.parametrize(("key", "ok"), [("3f1c0f3e-8d5b-4f0e-9a41-0b6b2f9c1d2e", True), ("k", True), ("", False),
                                         ("x" * 256, False), ("x" * 255, True), ("tab\t", False), ("é", False)])
def test_key_syntax(key: str, ok: bool) -> None:
    assert valid_key(key) is ok


@pytest.mark.parametrize("bad", ["", "  ", "a" * 201, "a\nb", "a\x00", "a\x7f", "a\x85b", "\u202egnp.exe",
                                 "a\u2028b", "\u2066x"])
def test_titles_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        PatchSession(title=bad)


def test_titles_kept() -> None:
    assert PatchSession(title="  Deck 📊 für Q3 ").title == "Deck 📊 für Q3"
    assert PatchSession(title=None).title is None
    assert PatchSession(title="e\u0301").title == "é"  # NFC


def test_export_skips_links_and_special_files(tmp_path: Path) -> None:
    root = tmp_path / "s_1"
    (root / "workspace" / "sub").mkdir(parents=True)
    (root / "workspace" / "sub" / "f.txt").write_bytes(b"data")
    (root / "transcript.jsonl").write_bytes(b'{"type":"message"}\n')
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"SECRET")
    os.symlink(secret, root / "workspace" / "link.txt")
    os.symlink(tmp_path, root / "workspace" / "dirlink")
    os.symlink(secret, root / "todo.json")  # even a top-level file that is a link is skipped
    os.mkfifo(root / "workspace" / "fifo")
    f = build(root, "s_1", b"{}", 10_000, tmp_path / "spool")
    data = f.read()
    f.close()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names == ["s_1", "s_1/session.json", "s_1/transcript.jsonl", "s_1/workspace", "s_1/workspace/sub",
                     "s_1/workspace/sub/f.txt"]
    assert b"SECRET" not in data
    assert list((tmp_path / "spool").iterdir()) == []  # the spool file is unlinked from the start
    with pytest.raises(ExportTooLarge):
        build(root, "s_1", b"{}", 10, tmp_path / "spool")


def test_the_cancelled_request_usage_is_marked_estimated() -> None:
    u = estimated_usage(1200, 37)
    assert (u.input, u.output, u.total_tokens, u.estimated) == (1200, 37, 1237, True)
