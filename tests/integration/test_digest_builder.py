"""The digest builder against a real Redis and a real session disk, with a fake lease holder.

The fake runtime is the inbox itself (XRANGE) plus the `InjectionRecorded` events the test feeds back.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from services.digest.builder import DigestBuilder
from shared.contracts.streams.artifacts import ArtifactChange
from shared.contracts.streams.inbox import INBOX_ADAPTER, Injection
from shared.contracts.streams.lifecycle import SessionDormant, SessionLive
from shared.contracts.streams.recorded import InjectionRecorded
from shared.redis import keys
from shared.storage.blobs import write_blob
from tests.support.polling import eventually

SID = "s_digest"
DOC = "gamma:file:d1"
BRIEF = "file:gamma-agent/brief.xml"


def deck(**titles: str) -> dict[str, Any]:
    cards = [{"id": f"card_{i}", "title": titles.get(f"card_{i}", f"T{i}")} for i in range(1, 6)]
    return {"title": "Deck", "theme": "dark", "metadata": {}, "assets": [], "cards": cards}


def doc_change(actor: str, rev: int, document: dict[str, Any], **kw: Any) -> ArtifactChange:
    return ArtifactChange(session_id=SID, ref=DOC, actor=actor, kind="document", from_revision=rev - 1,
                          to_revision=rev, document=document, **kw)


def file_change(data_dir: Path, actor: str, content: bytes, **kw: Any) -> ArtifactChange:
    """As a producer sends it: the bytes in a content blob on the session disk, the change naming it."""
    change = ArtifactChange(session_id=SID, ref=BRIEF, actor=actor, kind="file", **kw)
    sha = write_blob(data_dir, SID, "b_" + change.id, content)
    return change.model_copy(update={"blob": "b_" + change.id, "sha256": sha, "size": len(content)})


async def injections(client: aioredis.Redis, sid: str = SID) -> list[Injection]:
    out = []
    for _, fields in await client.xrange(keys.inbox(sid)):
        msg = INBOX_ADAPTER.validate_json(fields[b"data"])
        if isinstance(msg, Injection):
            out.append(msg)
    return out


async def go_live(client: aioredis.Redis, builder: DigestBuilder, fence: int = 1) -> None:
    await client.set(keys.lease(SID), f"w1:{fence}")
    await builder.on_live(SessionLive(session_id=SID, wake_id=f"w{fence}", fence=fence, worker_id="w1"))


async def wait_for(predicate: Any, limit_s: float = 10.0) -> None:
    await eventually(predicate, timeout=limit_s)


def recorded(inj: Injection) -> InjectionRecorded:
    return InjectionRecorded(session_id=inj.session_id, source=inj.source, source_id=inj.source_id,
                             entry_id="e_" + inj.source_id, ref=inj.ref, to_revision=inj.to_revision)


@pytest.fixture
async def builder(redis_client: aioredis.Redis, data_dir: Path):
    b = DigestBuilder(redis_client, data_dir, debounce_ms=150, poll_s=0.02)
    task = asyncio.create_task(b.run_due())
    yield b
    # One cancel ends the loop (shared/serving/cancel_safe.py).
    task.cancel()
    await asyncio.wait([task], timeout=10)
    assert task.cancelled(), "the due loop ran on after its cancel"


async def test_agent_changes_produce_nothing_and_advance_seen(redis_client: aioredis.Redis,
                                                             builder: DigestBuilder) -> None:
    await go_live(redis_client, builder)
    await builder.on_change(doc_change("agent", 1, deck()))
    await builder.on_change(doc_change("agent", 2, deck(card_2="Agent title")))
    await asyncio.sleep(0.5)  # scenario: past the debounce (150 ms), nothing may be sent
    assert await injections(redis_client) == []
    state = await builder.revisions.load(SID, DOC)
    assert state is not None and state.seen == 2 and state.current == 2 and state.seen_known


async def test_rapid_live_edits_coalesce_into_one_card_scoped_digest(redis_client: aioredis.Redis,
                                                                     builder: DigestBuilder) -> None:
    await go_live(redis_client, builder)
    await builder.on_change(doc_change("agent", 1, deck()))
    for i, title in enumerate(["A", "B", "C", "D", "Final title"], start=2):
        await builder.on_change(doc_change("user", i, deck(card_3=title)))

    async def one() -> bool:
        return len(await injections(redis_client)) == 1

    await wait_for(one)
    await asyncio.sleep(0.4)
    [inj] = await injections(redis_client)
    assert inj.injection.kind == "artifact_update" and inj.source == "artifact"
    assert inj.source_id == f"{DOC}@6" and inj.ref == DOC
    assert (inj.from_revision, inj.to_revision) == (1, 6)
    content = inj.injection.content
    assert content.startswith(f'<artifact_update ref="{DOC}" from_revision="1" to_revision="6">')
    assert 'On card_3, title changed from "T3" to "Final title".' in content
    assert "All other cards are unchanged." in content and '"B"' not in content

    # The runtime records it: seen advances to 6, nothing else is sent.
    await builder.on_recorded(recorded(inj))
    state = await builder.revisions.load(SID, DOC)
    assert state is not None and state.seen == 6 and not state.notes and not state.sent


async def test_newer_edit_before_record_supersedes(redis_client: aioredis.Redis, builder: DigestBuilder) -> None:
    await go_live(redis_client, builder)
    await builder.on_change(doc_change("agent", 1, deck()))
    await builder.on_change(doc_change("user", 2, deck(card_1="X")))
    await wait_for(lambda: _count(redis_client, 1))
    await builder.on_change(doc_change("user", 3, deck(card_1="X", card_4="Y")))
    await wait_for(lambda: _count(redis_client, 2))
    first, second = await injections(redis_client)
    assert second.source_id == f"{DOC}@3" and second.from_revision == 1
    assert "Changed scope: card_1, card_4." in second.injection.content
    # The runtime keeps only the newer one and records it; the older is never recorded.
    await builder.on_recorded(recorded(second))
    state = await builder.revisions.load(SID, DOC)
    assert state is not None and state.seen == 3 and state.sent == []


async def _count(client: aioredis.Redis, n: int) -> bool:
    return len(await injections(client)) == n


async def test_user_edit_under_an_agent_write_is_not_lost(redis_client: aioredis.Redis,
                                                          builder: DigestBuilder) -> None:
    await go_live(redis_client, builder)
    await builder.on_change(doc_change("agent", 1, deck()))
    await builder.on_change(doc_change("user", 2, deck(card_5="User edit")))
    # Within the debounce window the agent writes card_2 on top of the user's card_5.
    await builder.on_change(doc_change("agent", 3, deck(card_5="User edit", card_2="Agent")))
    await wait_for(lambda: _count(redis_client, 1))
    [inj] = await injections(redis_client)
    assert 'On card_5, title changed from "T5" to "User edit".' in inj.injection.content
    assert "card_2" not in inj.injection.content
    await builder.on_recorded(recorded(inj))
    state = await builder.revisions.load(SID, DOC)
    assert state is not None and state.carry is None and state.seen == 3


async def test_dormant_edits_go_to_the_manifest_and_clear_exactly_on_record(
    redis_client: aioredis.Redis, builder: DigestBuilder, data_dir: Path
) -> None:
    await builder.on_change(file_change(data_dir, "agent", b"<brief>\n<audience>board</audience>\n</brief>\n"))
    await builder.on_change(file_change(data_dir, "user", b"<brief>\n<audience>staff</audience>\n</brief>\n"))
    await builder.on_change(file_change(data_dir, "user", b"<brief>\n<audience>everyone</audience>\n</brief>\n",
                                        digest="The user widened the audience."))
    manifest = json.loads((data_dir / "sessions" / SID / "pending_artifacts.json").read_text())
    entry = manifest["updates"][BRIEF]
    assert entry["source_id"] == f"{BRIEF}@3" and (entry["from_revision"], entry["to_revision"]) == (1, 3)
    assert "The user widened the audience." in entry["digest"]
    assert "+<audience>everyone</audience>" in entry["digest"]  # one edit came without client text
    assert await injections(redis_client) == []  # dormant: nothing in the inbox

    # The runtime consumed revision 3; a newer edit made meanwhile (while waking) stays.
    await builder.on_change(file_change(data_dir, "user", b"<brief>\n<audience>all</audience>\n</brief>\n"))
    await builder.on_recorded(InjectionRecorded(session_id=SID, source="artifact", source_id=f"{BRIEF}@3",
                                                entry_id="e1", ref=BRIEF, to_revision=3))
    manifest = json.loads((data_dir / "sessions" / SID / "pending_artifacts.json").read_text())
    assert (manifest["updates"][BRIEF]["from_revision"], manifest["updates"][BRIEF]["to_revision"]) == (3, 4)
    assert "-<audience>everyone</audience>" in manifest["updates"][BRIEF]["digest"]
    await builder.on_recorded(InjectionRecorded(session_id=SID, source="artifact", source_id=f"{BRIEF}@4",
                                                entry_id="e2", ref=BRIEF, to_revision=4))
    manifest = json.loads((data_dir / "sessions" / SID / "pending_artifacts.json").read_text())
    assert manifest["updates"] == {}
    # Only the seen revision's content is kept for the next diff.
    state = await builder.revisions.load(SID, BRIEF)
    assert state is not None and state.seen == 4
    assert {p.name for p in (data_dir / "sessions" / SID / ".revisions").iterdir().__next__().iterdir()} == {"4", "ref"}


async def test_wake_sends_unrecorded_digests_at_once(redis_client: aioredis.Redis, builder: DigestBuilder,
                                                     data_dir: Path) -> None:
    await builder.on_change(file_change(data_dir, "agent", b"a\nb\n"))
    await builder.on_change(file_change(data_dir, "user", b"a\nB\n", digest="The user fixed b."))
    await go_live(redis_client, builder, fence=7)
    [inj] = await injections(redis_client)  # no debounce on wake
    assert inj.source_id == f"{BRIEF}@2" and "The user fixed b." in inj.injection.content
    # A change made before digest handled SessionLive but processed after it (late) is sent at once.
    change = file_change(data_dir, "user", b"a\nB\nc\n")
    await builder.on_change(change.model_copy(update={"ts": change.ts - 60_000}))
    assert len(await injections(redis_client)) == 2
    await builder.on_dormant(SessionDormant(session_id=SID, fence=7))
    assert not await redis_client.exists(keys.digest_live(SID))


async def test_a_redelivered_change_is_applied_once(redis_client: aioredis.Redis, builder: DigestBuilder,
                                                    data_dir: Path) -> None:
    change = file_change(data_dir, "user", b"x\n")
    await builder.on_change(change)
    await builder.on_change(change)
    state = await builder.revisions.load(SID, BRIEF)
    assert state is not None and state.current == 1
    assert not any((data_dir / "sessions" / SID / ".blobs").iterdir())  # the content blob was consumed
    # Remembered in the session's own hash (one key, with a TTL), no global key per change.
    assert await redis_client.hexists(keys.digest_handled(SID), change.id)
    assert 0 < await redis_client.ttl(keys.digest_handled(SID)) <= keys.DIGEST_HANDLED_TTL_S
    assert not await redis_client.exists(keys.once("digest-change", change.id))


async def test_a_change_handled_by_a_digest_before_the_upgrade_is_not_applied_again(
        redis_client: aioredis.Redis, builder: DigestBuilder, data_dir: Path) -> None:
    change = file_change(data_dir, "user", b"x\n")
    await redis_client.set(keys.once("digest-change", change.id), "1", ex=60)  # its global dedupe key
    await builder.on_change(change)
    assert await builder.revisions.load(SID, BRIEF) is None


async def test_a_missing_or_altered_blob_gives_a_changed_marker_not_a_wrong_diff(
    redis_client: aioredis.Redis, builder: DigestBuilder, data_dir: Path
) -> None:
    await builder.on_change(file_change(data_dir, "agent", b"a\nb\n"))
    gone = file_change(data_dir, "user", b"a\nB\n")
    (data_dir / "sessions" / SID / ".blobs" / str(gone.blob)).unlink()
    await builder.on_change(gone)
    altered = file_change(data_dir, "user", b"a\nC\n")
    (data_dir / "sessions" / SID / ".blobs" / str(altered.blob)).write_bytes(b"something else\n")
    await builder.on_change(altered)
    await go_live(redis_client, builder, fence=3)
    [inj] = await injections(redis_client)
    assert "changed" in inj.injection.content.lower() and "something else" not in inj.injection.content


async def test_a_pending_debounce_survives_a_restart(redis_client: aioredis.Redis, data_dir: Path) -> None:
    """The debounce timer lives in Redis: a builder that dies inside the window loses nothing."""
    first = DigestBuilder(redis_client, data_dir, debounce_ms=150)
    await go_live(redis_client, first)
    await first.on_change(doc_change("agent", 1, deck()))
    await first.on_change(doc_change("service", 2, deck(card_4="Image ready")))
    assert await redis_client.zcard(keys.DIGEST_DUE) == 1  # no loop ran: "crashed" before the window ended
    second = DigestBuilder(redis_client, data_dir, debounce_ms=150, poll_s=0.02)
    task = asyncio.create_task(second.run_due())

    async def due_cleared() -> bool:  # the due entry goes once the digest is in the inbox, just after
        return await redis_client.zcard(keys.DIGEST_DUE) == 0

    try:
        await wait_for(lambda: _count(redis_client, 1))
        await wait_for(due_cleared)
    finally:
        task.cancel()
    [inj] = await injections(redis_client)
    assert inj.injection.content.splitlines()[1] == "Changed by a background service."
    assert 'On card_4, title changed from "T4" to "Image ready".' in inj.injection.content


async def test_dormant_new_file_then_removal_in_the_manifest(redis_client: aioredis.Redis, builder: DigestBuilder,
                                                           data_dir: Path) -> None:
    """An upload into a dormant (never woken) session is one "new file" entry; removing it
    again before anything went out leaves nothing to tell; removing a file the agent saw is announced."""
    manifest_path = data_dir / "sessions" / SID / "pending_artifacts.json"
    await builder.on_change(file_change(data_dir, "user", b"<brief>otters</brief>\n", created=True))
    entry = json.loads(manifest_path.read_text())["updates"][BRIEF]
    assert ("A new file was added (22 bytes, 1 line). Its content:\n<quoted author=\"user\">\n<brief>otters</brief>"
            in entry["digest"])  # the file's text, quoted as its uploader's
    assert entry["source_id"] == f"{BRIEF}@1" and entry["from_revision"] is None
    # Its creation is in the manifest already (it may reach the agent): the removal replaces it.
    await builder.on_change(ArtifactChange(session_id=SID, ref=BRIEF, actor="user", kind="file", deleted=True))
    entry = json.loads(manifest_path.read_text())["updates"][BRIEF]
    assert entry["source_id"] == f"{BRIEF}@2" and "added and deleted again before you saw it" in entry["digest"]

    # Made and removed before the digest sent anything for it (both inside one debounce window of a
    # live session whose SessionLive is not handled yet): nothing at all to tell.
    other = "file:notes/new.txt"
    created = file_change(data_dir, "user", b"x\n", created=True).model_copy(update={"ref": other})
    await redis_client.set(keys.lease(SID), "w1:1")
    await builder.on_change(created)
    await builder.on_change(ArtifactChange(session_id=SID, ref=other, actor="user", kind="file", deleted=True))
    await redis_client.delete(keys.lease(SID))
    await builder.flush(SID, other)
    assert other not in json.loads(manifest_path.read_text())["updates"]
    state = await builder.revisions.load(SID, other)
    assert state is not None and state.notes == {} and state.sent == []

    # A file the agent saw, deleted while dormant: announced as a removal.
    await builder.on_recorded(InjectionRecorded(session_id=SID, source="artifact", source_id=f"{BRIEF}@2",
                                                entry_id="e1", ref=BRIEF, to_revision=2))
    await builder.on_change(file_change(data_dir, "agent", b"agent wrote\n"))
    await builder.on_change(ArtifactChange(session_id=SID, ref=BRIEF, actor="user", kind="file", deleted=True))
    entry = json.loads(manifest_path.read_text())["updates"][BRIEF]
    assert "The file was deleted." in entry["digest"] and entry["from_revision"] == 3
