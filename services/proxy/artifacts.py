"""User edits become `ArtifactChange{actor: "user"}` on `gamma:artifacts:changes` (the digest's input),
published only after the write is applied (live: after the runtime's reply; dormant: after the disk write).

Every change goes out through `publish_change`, which first numbers it and marks it in flight when
given the tracking client (`tracking(proxy)`), so a prompt accepted after the write waits for its
digest (shared/streams/causal.py). A route that publishes a new kind of change (a DELETE) passes it too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis.asyncio as aioredis
from faststream.redis import RedisBroker

from services.proxy.edge.errors import ApiError
from shared.contracts.streams.artifacts import ArtifactChange
from shared.redis import keys
from shared.streams import causal
from shared.streams.bus import publish

MAX_DIGEST_CHARS = 4000


@dataclass(frozen=True)
class BlobRef:
    name: str
    sha256: str
    size: int


def client_digest(header: str | None) -> str | None:
    """X-Gamma-Digest: plain text; percent-encoded UTF-8 is decoded. The server hands header bytes over
    as Latin-1: raw non-ASCII bytes are read back as the UTF-8 they are, never as Latin-1 characters
    (`Ã©` for `é`), and bytes or escapes that are not UTF-8 are refused (400)."""
    if header is None or not header.strip():
        return None
    try:
        if not header.isascii():
            header = header.encode("latin-1").decode("utf-8")
        text = unquote(header, errors="strict") if "%" in header else header
    except UnicodeError:
        raise ApiError(400, "X-Gamma-Digest is not UTF-8 (send non-ASCII text as UTF-8, "
                       "or percent-encoded UTF-8)") from None
    if len(text) > MAX_DIGEST_CHARS:
        raise ApiError(400, f"X-Gamma-Digest is longer than {MAX_DIGEST_CHARS} characters")
    return text


def file_ref(path: str) -> str:
    return f"file:{path}"


def document_ref(doc: str) -> str:
    return f"gamma:file:{doc}"


async def publish_change(broker: RedisBroker, change: ArtifactChange, track: aioredis.Redis | None) -> None:
    """Publish one user change; with `track`, numbered and in flight first (before the write's answer)."""
    if track is None:
        await publish(broker, keys.ARTIFACT_CHANGES, change)
        return
    seq = await causal.register(track, change.session_id, change.ref)
    try:
        await publish(broker, keys.ARTIFACT_CHANGES, change.model_copy(update={"seq": seq}))
    except BaseException:
        await causal.unregister(track, change.session_id, seq, change.ref)
        raise


async def file_changed(broker: RedisBroker, sid: str, path: str, blob: BlobRef, digest: str | None,
                       revision: int | None = None, *, created: bool = False,
                       track: aioredis.Redis | None = None) -> None:
    """`blob`: the content blob holding the new bytes (shared/storage/blobs.py); the entry only names it."""
    await publish_change(broker, ArtifactChange(
        session_id=sid, ref=file_ref(path), actor="user", kind="file",
        to_revision=revision, from_revision=(revision - 1) if revision else None,
        blob=blob.name, sha256=blob.sha256, size=blob.size, digest=digest, created=created,
    ), track)


async def file_deleted(broker: RedisBroker, sid: str, path: str, digest: str | None,
                       revision: int | None = None, *, track: aioredis.Redis | None = None) -> None:
    """A removal: the agent is told "the file was deleted" (no content)."""
    await publish_change(broker, ArtifactChange(
        session_id=sid, ref=file_ref(path), actor="user", kind="file", deleted=True,
        to_revision=revision, from_revision=(revision - 1) if revision else None, digest=digest,
    ), track)


async def document_changed(broker: RedisBroker, sid: str, doc: str, document: dict[str, Any],
                           from_revision: int | None, to_revision: int, digest: str | None, *,
                           track: aioredis.Redis | None = None) -> None:
    await publish_change(broker, ArtifactChange(
        session_id=sid, ref=document_ref(doc), actor="user", kind="document",
        from_revision=from_revision, to_revision=to_revision, document=document, digest=digest,
        created=to_revision == 1,  # a new deck starts at revision 1 (shared.ui.write_model.edit_document)
    ), track)


async def document_deleted(broker: RedisBroker, sid: str, doc: str, digest: str | None, *,
                           track: aioredis.Redis | None = None) -> None:
    """The digest numbers the removal itself (its current revision + 1): the deck's own revision
    counter ends with the file."""
    await publish_change(broker, ArtifactChange(
        session_id=sid, ref=document_ref(doc), actor="user", kind="document", deleted=True, digest=digest,
    ), track)
