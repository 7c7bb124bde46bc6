"""`sessions/{sid}/pending_artifacts.json` (docs/architecture.md "The digest"), written only by digest."""

from __future__ import annotations

from pydantic import Field

from shared.contracts.base import Contract


class PendingArtifact(Contract):
    digest: str
    from_revision: int | None = None
    to_revision: int | None = None
    source_id: str


class PendingArtifactUpdates(Contract):
    """ref -> coalesced digest, with revisions kept alongside."""

    updates: dict[str, PendingArtifact] = Field(default_factory=dict)
