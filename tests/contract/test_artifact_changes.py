"""Contract of `gamma:artifacts:changes`: proxy, runtime, async workers -> digest (group `digest`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import redis.asyncio as aioredis

from services.proxy.artifacts import BlobRef, document_changed, document_deleted, file_changed, file_deleted
from shared.contracts.streams.artifacts import ArtifactChange
from shared.redis import keys
from shared.storage.blobs import write_blob
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip, pel_empty
from tests.support.inproc import connected_broker, running, settings_for
from tests.support.polling import eventually


async def test_file_and_document_changes_of_every_actor_round_trip(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    deck = {"title": "Q3", "theme": "dark", "metadata": {}, "assets": [], "cards": [{"id": "c1", "body": "ü"}]}
    messages = [
        ArtifactChange(session_id="s1", ref="file:brief.xml", actor="user", kind="file", from_revision=1,
                       to_revision=2, blob="b_c1", sha256=hashlib.sha256(b"<brief/>\x00\xff").hexdigest(), size=10,
                       digest="user rewrote the brief"),
        ArtifactChange(session_id="s1", ref="gamma:file:deck1", actor="agent", kind="document", to_revision=3,
                       document=deck),
        ArtifactChange(session_id="s1", ref="file:old.txt", actor="service", kind="file", deleted=True),
        ArtifactChange(session_id="s1", ref="file:in/new.txt", actor="user", kind="file", to_revision=1,
                       blob="b_c2", sha256=hashlib.sha256(b"new").hexdigest(), size=3, created=True),
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.ARTIFACT_CHANGES, groups=["digest"],
                            model=ArtifactChange, messages=messages)


async def test_invalid_artifact_change_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.ARTIFACT_CHANGES, group="digest", model=ArtifactChange,
        bad_bodies=[
            {"session_id": "s1", "ref": "file:a", "actor": "robot", "kind": "file"},
            {"session_id": "s1", "ref": "file:a", "actor": "user", "kind": "file", "to_revision": "latest"},
            {"session_id": "s1", "ref": "file:a", "actor": "user", "kind": "file", "blob": "../../etc/passwd"},
        ],
        valid=ArtifactChange(session_id="s1", ref="file:a", actor="user", kind="file"),
    )
    assert "actor" in letters[0].error
    assert "to_revision" in letters[1].error
    assert "blob" in letters[2].error


async def test_proxy_publishers_reach_the_real_digest_service(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """Producers: the proxy's `file_changed` / `document_changed`; consumer: the digest app, which
    records both refs' revisions."""
    from services.digest.app import create_app

    sid = "s_artifacts1"
    deck = {"title": "Q3", "theme": {}, "metadata": {}, "assets": [], "cards": [{"id": "c1", "title": "Intro"}]}
    async with running(create_app, settings_for(redis_url, tmp_path)), connected_broker(redis_url) as broker:
        blob = BlobRef("b_brief", write_blob(tmp_path, sid, "b_brief", b"# Brief\n"), 8)
        await file_changed(broker, sid, "brief.md", blob, digest=None, revision=2)
        await document_changed(broker, sid, "deck1", deck, from_revision=None, to_revision=1, digest="added intro")
        await file_deleted(broker, sid, "old.md", digest=None, revision=4)
        await document_deleted(broker, sid, "deck0", digest="removed")
        refs = ("file:brief.md", "gamma:file:deck1", "file:old.md", "gamma:file:deck0")

        async def both_recorded() -> bool:
            return all([await redis_client.hexists(keys.revisions(sid), ref) for ref in refs])

        await eventually(both_recorded, what="the digest's revision records")
        await eventually(pel_empty(redis_client, keys.ARTIFACT_CHANGES, "digest"), what="acks")
    states = {ref: json.loads(raw) for ref, raw in (await redis_client.hgetall(keys.revisions(sid))).items()}
    assert states[b"file:brief.md"]["current"] == 2
    assert states[b"gamma:file:deck1"]["current"] == 1
    assert states[b"gamma:file:deck1"]["notes"]["1"]["created"] is True  # a new deck (revision 1)
    assert states[b"file:old.md"]["deleted"] is True and states[b"file:old.md"]["current"] == 4
    assert states[b"gamma:file:deck0"]["deleted"] is True and states[b"gamma:file:deck0"]["current"] == 1
    assert await redis_client.xlen(keys.DEADLETTER) == 0
