"""A session's model change as a transcript entry (docs/models.md "Sessions"): written by the runtime
when the session is live (services/runtime/inbox/model_switch.py), by the proxy on the disk when it is
dormant, under the dormant-write lock, as a dormant rewind is (shared/history/rewind.py)."""

from __future__ import annotations

import secrets

from shared.contracts.http import ModelConfig
from shared.contracts.records.transcript import LeafEntry, ModelChangeEntry
from shared.history.rewind import now_iso, read_transcript
from shared.storage.disk import SessionPaths, append_jsonl


def change_entry(model: ModelConfig, parent_id: str | None, entry_id: str) -> ModelChangeEntry:
    return ModelChangeEntry(id=entry_id, parent_id=parent_id, timestamp=now_iso(), model_id=model.name or "",
                            reasoning_effort=model.reasoning_effort, api=model.api)


def record_on_disk(paths: SessionPaths, model: ModelConfig) -> str | None:
    """Append the change at the transcript's leaf; None (nothing written) for a session that has no
    transcript yet: its first wake starts with the row's model, so there is no earlier model to mark."""
    entries = read_transcript(paths)
    if not entries:
        return None
    last = entries[-1]
    leaf = last.target_id if isinstance(last, LeafEntry) else last.id
    ids = {e.id for e in entries}
    while (entry_id := secrets.token_hex(4)) in ids:
        pass
    entry = change_entry(model, leaf, entry_id)
    append_jsonl(paths.transcript, [entry.model_dump(mode="json", by_alias=True, exclude_none=True)])
    return entry.id
