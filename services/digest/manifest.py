"""`sessions/{sid}/pending_artifacts.json` (docs/architecture.md "Ownership", "The digest"); only digest writes it.

The runtime reads it on wake and turns each entry into an injection placed before the user message;
its `InjectionRecorded` then tells us which entries to clear. Writes are atomic (tmp+fsync+rename), so
a reader sees the old or the new manifest, never a torn one. Callers hold the session's digest lock.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from shared.contracts.records.pending import PendingArtifact, PendingArtifactUpdates
from shared.storage.disk import atomic_write_json, read_json, session_paths


class Manifest:
    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir

    def path(self, sid: str) -> Path:
        return session_paths(self._data_dir, sid).pending_artifacts

    def read(self, sid: str) -> PendingArtifactUpdates:
        try:
            raw = read_json(self.path(sid))
        except ValueError:
            raw = None  # unreadable: rebuilt from the revision state on the next write
        if raw is None:
            return PendingArtifactUpdates()
        try:
            return PendingArtifactUpdates.model_validate(raw)
        except ValidationError:
            return PendingArtifactUpdates()

    def _write(self, sid: str, manifest: PendingArtifactUpdates) -> None:
        atomic_write_json(self.path(sid), manifest)

    def put(self, sid: str, ref: str, entry: PendingArtifact) -> None:
        """One coalesced digest per ref: a newer one replaces the older (it covers it)."""
        manifest = self.read(sid)
        manifest.updates[ref] = entry
        self._write(sid, manifest)

    def clear_upto(self, sid: str, ref: str, revision: int) -> bool:
        """Remove the entry for `ref` if it covers no revision newer than `revision` (a newer edit stays)."""
        path = self.path(sid)
        if not path.exists():
            return False
        manifest = self.read(sid)
        entry = manifest.updates.get(ref)
        if entry is None or (entry.to_revision is not None and entry.to_revision > revision):
            return False
        del manifest.updates[ref]
        self._write(sid, manifest)
        return True

    def get(self, sid: str, ref: str) -> PendingArtifact | None:
        return self.read(sid).updates.get(ref)
