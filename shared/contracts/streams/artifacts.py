"""`gamma:artifacts:changes` (proxy, runtime, async workers -> digest)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from shared.contracts.base import Contract, new_id, now_ms
from shared.contracts.records.blobref import BLOB_NAME, SHA256

Actor = Literal["user", "agent", "service"]


class ArtifactChange(Contract):
    """One change to a file (`file:<path>`) or a Gamma document (`gamma:file:<doc>`).

    A file's new bytes are not in the entry: `blob` names the immutable content blob
    `sessions/{sid}/.blobs/{blob}` (shared/storage/blobs.py) the producer wrote, `sha256` and `size`
    describe it; the digest copies it into the ref's revisions and removes it. `document` carries a
    deck's new JSON. `deleted` marks removal, `created` a file or deck that did not exist before the
    write (the digest says "new file" instead of a diff). `digest` is a client-supplied digest text
    (X-Gamma-Digest) that wins over a computed one. `seq`: see `shared/streams/causal.py`.
    """

    id: str = Field(default_factory=lambda: new_id("c_"))
    session_id: str
    ref: str
    actor: Actor
    kind: Literal["file", "document"]
    from_revision: int | None = None
    to_revision: int | None = None
    blob: str | None = Field(None, pattern=BLOB_NAME)
    sha256: str | None = Field(None, pattern=SHA256)
    size: int | None = Field(None, ge=0)
    document: dict[str, Any] | None = None
    deleted: bool = False
    created: bool = False
    digest: str | None = None
    # The proxy's number for a change it acknowledged (shared/streams/causal.py): the digest removes it from the
    # session's in-flight set once the change is delivered or dismissed. None: not tracked (agent changes).
    seq: int | None = Field(None, ge=1)
    ts: int = Field(default_factory=now_ms)
