"""Unreferenced images leave the session disk (docs/architecture.md "Images").

An image is kept while any transcript entry refers to it: entries of every branch, since a rewind or an
edit keeps the abandoned branch in the tree and a switch back replays it (shared/history/transcript_tree.py).
Snapshots never hold `.images/` (shared/storage/snapshots.py records the workspace, documents, todo and UI
state), and a fork links the images of its branch into its own directory (`link_referenced`), so the
source's collection never takes a fork's image. What is left is an image no entry names: attachments
of a message refused after they were stored (a 409 on `expected_run_id`, an edit refused), a tool's
image whose result was never recorded (a crash, an abort mid-batch), and leftover temp files.

A file younger than `grace_s` stays whatever the transcript says: the proxy stores a prompt's
attachments before the prompt is in the inbox, and the runtime records it only once it reads it.
`store_image` refreshes the mtime of an image it finds already stored, and a collection first renames
a candidate aside and checks its mtime again, so an image stored again while it is being collected is
either put back or written anew, never lost.

The runtime collects when it closes a session (services/runtime/hosting/worker.py), holding the lease: no
other transcript writer runs then.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.storage.disk import SessionPaths, atomic_write_bytes

HASH_NAME = re.compile(r"^[0-9a-f]{64}$")
ASIDE_PREFIX = ".gc-"
MAX_DEPTH = 64  # an entry's JSON is shallow; deeper values are not looked at
# Every reference is a dict with this key (`_refs_in`), which the transcript's writers never escape: a
# line without it names no image and need not be parsed (most lines of a long session carry none).
IMAGE_KEY = b'"mimeType"'


@dataclass(frozen=True)
class Collected:
    removed: int = 0
    removed_bytes: int = 0
    kept: int = 0


def _refs_in(value: Any, out: set[str]) -> None:
    """Hashes of every image reference in one transcript line, wherever the entry keeps it (a user
    message's attachments, a tool result's images): a dict with `sha256` and `mimeType`."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            continue
        if isinstance(item, dict):
            digest = item.get("sha256")
            if isinstance(digest, str) and "mimeType" in item and HASH_NAME.match(digest):
                out.add(digest)
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))


def referenced(lines: Iterable[dict[str, Any]]) -> set[str]:
    out: set[str] = set()
    for line in lines:
        _refs_in(line, out)
    return out


def transcript_refs(paths: SessionPaths) -> set[str]:
    """The hashes the transcript names. Only the lines that can hold a reference are parsed: a long
    session's transcript is read at every close, and most of its lines carry no image."""
    try:
        raw = paths.transcript.read_bytes()
    except FileNotFoundError:
        return set()
    lines = raw.split(b"\n")
    if lines and lines[-1] != b"":
        lines = lines[:-1]  # a torn last line: never recorded (shared/storage/disk.py iter_jsonl)
    out: set[str] = set()
    for line in lines:
        if IMAGE_KEY not in line:
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        _refs_in(value, out)
    return out


def _older(path: Path, cutoff: float) -> bool:
    try:
        return path.stat().st_mtime < cutoff
    except FileNotFoundError:
        return False


def _collect_one(path: Path, cutoff: float) -> int:
    """Remove one candidate unless it was stored again meanwhile; its size when removed, else -1."""
    aside = path.with_name(ASIDE_PREFIX + path.name)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return -1
    st = aside.stat()
    if st.st_mtime >= cutoff:  # stored again between the listing and the rename: it stays
        if not path.exists():
            os.rename(aside, path)
        else:
            aside.unlink()
        return -1
    aside.unlink()
    return st.st_size


def collect(paths: SessionPaths, grace_s: float, now: float | None = None) -> Collected:
    """Remove the images no transcript entry refers to and older than `grace_s`. Blocking."""
    directory = paths.images
    try:
        names = [e.name for e in os.scandir(directory) if e.is_file(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return Collected()
    cutoff = (time.time() if now is None else now) - grace_s
    if not any(_older(directory / name, cutoff) for name in names):
        return Collected(kept=len(names))  # nothing past the grace: the transcript need not be read
    keep = transcript_refs(paths)
    removed = removed_bytes = kept = 0
    for name in names:
        path = directory / name
        if name in keep:
            kept += 1
            continue
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime >= cutoff:
                kept += 1
                continue
            size = _collect_one(path, cutoff)
            if size < 0:
                kept += 1
            else:
                removed, removed_bytes = removed + 1, removed_bytes + size
    return Collected(removed, removed_bytes, kept)


def link_referenced(src: Path, dst: Path, lines: Iterable[dict[str, Any]]) -> int:
    """A fork's images: each one its branch refers to, hard-linked from the source's `.images/` into
    the fork's (copied across file systems). An image the source no longer has is skipped (the
    request then says so in text). The number linked or copied."""
    count = 0
    for digest in sorted(referenced(lines)):
        source, target = src / digest, dst / digest
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except FileNotFoundError:
            continue
        except OSError:
            atomic_write_bytes(target, source.read_bytes())
        count += 1
    return count
