"""`gamma:artifacts:changes` (proxy, runtime, async workers -> digest)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import Contract, new_id, now_ms

Actor = Literal["user", "agent", "service"]


class ArtifactChange(Contract):
    """One change to a file (`file:<path>`) or a Gamma document (`gamma:file:<doc>`).

    `content_b64` carries a file's new bytes; `document` a deck's new JSON. `deleted` marks removal.
    `digest` is a client-supplied digest text (X-Gamma-Digest) that wins over a computed one.
    """

    id: str = Field(default_factory=lambda: new_id("c_"))
    session_id: str
    ref: str
    actor: Actor
    kind: Literal["file", "document"]
    from_revision: int | None = None
    to_revision: int | None = None
    content_b64: str | None = None
    document: dict[str, Any] | None = None
    deleted: bool = False
    digest: str | None = None
    ts: int = Field(default_factory=now_ms)
