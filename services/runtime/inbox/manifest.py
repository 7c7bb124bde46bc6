"""The dormant artifact manifest (`pending_artifacts.json`, written by digest) read at wake: each
pending item becomes an artifact_update injection placed before the woken prompt. Items have no
inbox entry; recording one publishes InjectionRecorded and digest clears it from the manifest."""

from __future__ import annotations

import structlog
from pydantic import ValidationError

from services.runtime.store.transcript import Transcript
from services.runtime.turns.delivery_rules import Found
from services.runtime.turns.pending_queue import PendingQueue
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.records.pending import PendingArtifactUpdates
from shared.contracts.streams.inbox import Injection
from shared.storage.disk import SessionPaths, read_json
from shared.trust.trusted_blocks import ensure_block

log = structlog.get_logger()


def queue_manifest(sid: str, paths: SessionPaths, transcript: Transcript, queue: PendingQueue) -> int:
    """Queue the manifest's items (held for the next turn); returns how many were queued."""
    raw = read_json(paths.pending_artifacts)
    if not raw:
        return 0
    try:
        manifest = PendingArtifactUpdates.model_validate(raw)
    except ValidationError:
        log.warning("pending_artifacts_invalid", session_id=sid)
        return 0
    queued = 0
    for ref, item in manifest.updates.items():
        content = ensure_block("artifact_update", item.digest,
                               {"ref": ref, "from_revision": item.from_revision, "to_revision": item.to_revision})
        inj = Injection(session_id=sid, injection=RuntimeInjection(kind="artifact_update", content=content),
                        source="artifact", source_id=item.source_id, ref=ref,
                        from_revision=item.from_revision, to_revision=item.to_revision)
        if (inj.source, inj.source_id) in transcript.sources:
            continue  # consumed before (digest has not cleared it yet)
        if queue.route_update(inj, None, hold=True) is not Found.COVERED:
            queued += 1
    return queued
