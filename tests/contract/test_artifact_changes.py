"""Contract of `gamma:artifacts:changes`: proxy, runtime, async workers -> digest (group `digest`)."""

from __future__ import annotations

import base64

import redis.asyncio as aioredis

from shared import keys
from shared.contracts.artifacts import ArtifactChange
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip


async def test_file_and_document_changes_of_every_actor_round_trip(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    deck = {"title": "Q3", "theme": "dark", "metadata": {}, "assets": [], "cards": [{"id": "c1", "body": "ü"}]}
    messages = [
        ArtifactChange(session_id="s1", ref="file:brief.xml", actor="user", kind="file", from_revision=1,
                       to_revision=2, content_b64=base64.b64encode(b"<brief/>\x00\xff").decode(),
                       digest="user rewrote the brief"),
        ArtifactChange(session_id="s1", ref="gamma:file:deck1", actor="agent", kind="document", to_revision=3,
                       document=deck),
        ArtifactChange(session_id="s1", ref="file:old.txt", actor="service", kind="file", deleted=True),
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.ARTIFACT_CHANGES, groups=["digest"],
                            model=ArtifactChange, messages=messages)


async def test_invalid_artifact_change_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.ARTIFACT_CHANGES, group="digest", model=ArtifactChange,
        bad_bodies=[
            {"session_id": "s1", "ref": "file:a", "actor": "robot", "kind": "file"},
            {"session_id": "s1", "ref": "file:a", "actor": "user", "kind": "file", "to_revision": "latest"},
        ],
        valid=ArtifactChange(session_id="s1", ref="file:a", actor="user", kind="file"),
    )
    assert "actor" in letters[0].error
    assert "to_revision" in letters[1].error
