"""File contents by reference: immutable content blobs on the session disk, named in stream entries.

Sent inline, a 1 MiB file would cross Redis twice as base64 (the inbox's FileWrite and gamma:artifacts:changes'
ArtifactChange: ~3 MiB of Redis per MiB written, docs/architecture.md "Limits on hostile input"). Instead the producer writes the bytes once to
`sessions/{sid}/.blobs/{name}` (atomically, never rewritten) and the entry carries the name,
the SHA-256 and the size:
- a live PUT: the proxy writes the blob, the runtime copies it into the workspace (checking the hash),
  and the same blob is then named by the proxy's ArtifactChange;
- every ArtifactChange of a file (agent tools, bash, dormant PUTs) names its own blob.
The digest copies the blob into the ref's revision content and removes it. A deleted or overwritten
workspace file cannot change what the digest diffs: the blob is a copy taken when the change was made.
A blob whose change was never published (a crash in between, a refused or timed-out write) is swept
after GAMMA_BLOB_ORPHAN_S.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from pathlib import Path

from shared.contracts.records.blobref import BLOB_NAME
from shared.storage.disk import atomic_write_bytes, session_paths

NAME = re.compile(BLOB_NAME)


def blob_dir(data_dir: Path, sid: str) -> Path:
    return session_paths(data_dir, sid).root / ".blobs"


def blob_path(data_dir: Path, sid: str, name: str) -> Path:
    if not NAME.match(name):
        raise ValueError(f"invalid blob name {name!r}")
    return blob_dir(data_dir, sid) / name


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_blob(data_dir: Path, sid: str, name: str, data: bytes) -> str:
    """Write the blob; returns its SHA-256."""
    atomic_write_bytes(blob_path(data_dir, sid, name), data)
    return sha256(data)


def read_blob(data_dir: Path, sid: str, name: str, expected_sha256: str) -> bytes | None:
    """The blob's bytes, or None when it is gone or is not the content the entry names."""
    try:
        data = blob_path(data_dir, sid, name).read_bytes()
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if sha256(data) == expected_sha256 else None


def remove_blob(data_dir: Path, sid: str, name: str) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        blob_path(data_dir, sid, name).unlink()


def sweep_orphans(data_dir: Path, sid: str, older_than_s: float) -> int:
    """Remove blobs (and temp files) older than `older_than_s`; the number removed."""
    directory = blob_dir(data_dir, sid)
    if not directory.is_dir():
        return 0
    cutoff = time.time() - older_than_s
    removed = 0
    for path in directory.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
    return removed
