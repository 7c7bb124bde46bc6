"""Image collection on the session disk (shared/media/image_gc.py): references of every branch and entry
kind are found, the grace keeps a fresh file, a file stored again mid-collection stays, and a
fork's links survive the source's collection."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from shared.history import fork
from shared.media.image_gc import Collected, _collect_one, collect, link_referenced, referenced
from shared.storage.disk import SessionPaths

A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


def ref(digest: str) -> dict[str, object]:
    return {"sha256": digest, "mimeType": "image/png", "width": 4, "height": 4, "bytes": 10}


def session(tmp_path: Path, lines: list[dict[str, object]], stored: list[str], age_s: float) -> SessionPaths:
    paths = SessionPaths(tmp_path / "s")
    paths.images.mkdir(parents=True)
    paths.transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    old = time.time() - age_s
    for name in stored:
        (paths.images / name).write_bytes(name.encode())
        os.utime(paths.images / name, (old, old))
    return paths


LINES: list[dict[str, object]] = [
    {"type": "message", "id": "u1", "parentId": None, "message": {"role": "user", "content": "x", "images": [ref(A)]}},
    # another branch of the tree: the same parent
    {"type": "message", "id": "u2", "parentId": None, "message": {"role": "user", "content": "y"}},
    {"type": "message", "id": "t1", "parentId": "u2", "message": {"role": "toolResult", "toolCallId": "c",
                                                                  "toolName": "read", "images": [ref(B)]}},
    {"type": "message", "id": "u3", "parentId": "t1", "message": {"role": "user", "content": "sha256 " + C}},
]


def test_references_of_every_branch_are_found_and_text_is_not_a_reference() -> None:
    assert referenced(LINES) == {A, B}


def test_unreferenced_old_files_go_and_the_rest_stays(tmp_path: Path) -> None:
    paths = session(tmp_path, LINES, [A, B, C, f".{D}.x.tmp"], age_s=7200)
    (paths.images / D).write_bytes(b"fresh")  # unreferenced but within the grace
    done = collect(paths, grace_s=3600)
    assert sorted(p.name for p in paths.images.iterdir()) == [A, B, D]
    assert (done.removed, done.kept) == (2, 3) and done.removed_bytes == 64 + len(f".{D}.x.tmp")


def test_a_file_stored_again_while_collected_is_put_back(tmp_path: Path) -> None:
    paths = session(tmp_path, [], [C], age_s=7200)
    cutoff = time.time() - 3600
    os.utime(paths.images / C)  # what store_image does when it finds the file: after the listing
    assert _collect_one(paths.images / C, cutoff) == -1 and (paths.images / C).read_bytes() == C.encode()
    os.utime(paths.images / C, (cutoff - 10, cutoff - 10))
    assert _collect_one(paths.images / C, cutoff) == 64 and not (paths.images / C).exists()
    assert list(paths.images.iterdir()) == []


def test_a_forks_links_survive_the_sources_collection(tmp_path: Path) -> None:
    src = session(tmp_path, LINES[:1], [A, B], age_s=7200)
    dst = SessionPaths(tmp_path / "fork")
    assert link_referenced(src.images, dst.images, LINES[2:3] + [{"images": [ref(D)]}]) == 1  # D: not in the source
    assert [p.name for p in dst.images.iterdir()] == [B]
    collect(src, grace_s=0)
    assert not (src.images / B).exists() and (dst.images / B).read_bytes() == B.encode()
    assert collect(SessionPaths(tmp_path / "none"), grace_s=0).removed == 0


def test_without_a_file_past_the_grace_the_transcript_is_not_read(tmp_path: Path) -> None:
    paths = session(tmp_path, [], [C], age_s=0)
    paths.transcript.unlink()
    paths.transcript.mkdir()  # unreadable as a file: reading it would raise
    assert collect(paths, grace_s=3600) == Collected(kept=1)


def test_a_fork_parses_only_the_lines_that_can_name_an_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long branch is mostly text: a fork finds its images without parsing every line of it."""
    paths = session(tmp_path, LINES, [], age_s=0)
    raw = paths.transcript.read_bytes()
    spans, at = [], 0
    for line in raw.split(b"\n")[:-1]:
        spans.append((at, len(line)))
        at += len(line) + 1
    parsed: list[bytes] = []

    def parse(line: bytes) -> object:
        parsed.append(line)
        return json.loads(line)

    monkeypatch.setattr(fork, "parse_line", parse)
    plan = fork.ForkPlan("u3", paths.transcript, spans, {}, tmp_path / "objects", paths.images)
    assert referenced(plan.image_lines()) == {A, B}
    assert len(parsed) == 2  # u1's and t1's lines; u2 and u3 (a hash in text) are not parsed
