"""`seen` advances only through a recorded digest or the agent's own write (real Redis)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from services.digest.builder import DigestBuilder
from services.digest.coalesce import NO_NET_CHANGE
from tests.integration.test_digest_builder import (
    BRIEF,
    DOC,
    SID,
    deck,
    doc_change,
    file_change,
    go_live,
    injections,
    recorded,
    wait_for,
)


@pytest.fixture
async def builder(redis_client: aioredis.Redis, data_dir: Path):
    b = DigestBuilder(redis_client, data_dir, debounce_ms=150, poll_s=0.02)
    task = asyncio.create_task(b.run_due())
    yield b
    task.cancel()


async def _count(client: aioredis.Redis, n: int) -> bool:
    return len(await injections(client)) == n


async def test_a_repeated_save_after_a_record_is_shown_not_silently_marked_seen(
    redis_client: aioredis.Redis, builder: DigestBuilder, data_dir: Path
) -> None:
    """Fault suite: a save retried after a lost answer (same content) arrived after the previous digest
    was recorded; the digest found nothing to say and set seen to it: 5..7 recorded, then 8..9."""
    await go_live(redis_client, builder)
    await builder.on_change(file_change(data_dir, "agent", b"a\n"))
    await builder.on_change(file_change(data_dir, "user", b"b\n"))
    await wait_for(lambda: _count(redis_client, 1))
    [first] = await injections(redis_client)
    await builder.on_recorded(recorded(first))
    await builder.on_change(file_change(data_dir, "user", b"b\n"))  # the retry: revision 3, same content
    await wait_for(lambda: _count(redis_client, 2))
    second = (await injections(redis_client))[1]
    assert (second.from_revision, second.to_revision) == (2, 3)
    assert NO_NET_CHANGE in second.injection.content
    state = await builder.revisions.load(SID, BRIEF)
    assert state is not None and state.seen == 2  # not before the agent records it
    await builder.on_recorded(recorded(second))
    state = await builder.revisions.load(SID, BRIEF)
    assert state is not None and state.seen == 3 and not state.notes


async def test_an_undo_while_a_digest_is_out_replaces_it(redis_client: aioredis.Redis,
                                                         builder: DigestBuilder, data_dir: Path) -> None:
    """An edit undone while its digest is still queued: the runtime must get a newer digest for the ref
    (it replaces the queued one), else the agent reads 'changed to b' about content that is 'a' again."""
    await go_live(redis_client, builder)
    await builder.on_change(file_change(data_dir, "agent", b"a\n"))
    await builder.on_change(file_change(data_dir, "user", b"b\n"))
    await wait_for(lambda: _count(redis_client, 1))
    await builder.on_change(file_change(data_dir, "user", b"a\n"))  # undone before the runtime recorded 1..2
    await wait_for(lambda: _count(redis_client, 2))
    await asyncio.sleep(0.3)
    second = (await injections(redis_client))[1]
    assert (second.from_revision, second.to_revision) == (1, 3) and NO_NET_CHANGE in second.injection.content
    state = await builder.revisions.load(SID, BRIEF)
    assert state is not None and state.seen == 1 and state.sent == [2, 3]


async def test_a_digest_that_overlaps_a_recorded_one_is_corrected(redis_client: aioredis.Redis,
                                                                  builder: DigestBuilder, data_dir: Path) -> None:
    """0..2 is out when revision 3 arrives, so 0..3 is composed from seen=0 (it must replace 0..2 if
    the runtime still queues it). When 0..2 is recorded first, 0..3 would tell the agent 1..2 again:
    a corrected 2..3 under a new source id replaces 0..3 in the runtime's queue."""
    await go_live(redis_client, builder)
    await builder.on_change(file_change(data_dir, "agent", b"a\n"))
    await builder.on_change(file_change(data_dir, "user", b"b\n"))
    await wait_for(lambda: _count(redis_client, 1))
    await builder.on_change(file_change(data_dir, "user", b"c\n"))
    await wait_for(lambda: _count(redis_client, 2))
    first, overlapping = await injections(redis_client)
    assert (overlapping.from_revision, overlapping.to_revision) == (1, 3)
    await builder.on_recorded(recorded(first))
    await wait_for(lambda: _count(redis_client, 3), limit_s=2.0)
    corrected = (await injections(redis_client))[2]
    assert corrected.source_id == f"{BRIEF}@3#2" and (corrected.from_revision, corrected.to_revision) == (2, 3)
    assert "-b" in corrected.injection.content and "+c" in corrected.injection.content
    await builder.on_recorded(recorded(corrected))
    state = await builder.revisions.load(SID, BRIEF)
    assert state is not None and state.seen == 3 and state.sent == [] and not state.notes
    await asyncio.sleep(0.3)  # scenario: past the debounce, nothing more may come
    assert len(await injections(redis_client)) == 3  # nothing more to say


async def test_a_first_change_after_unpublished_revisions_is_told_from_nothing(
    redis_client: aioredis.Redis, builder: DigestBuilder
) -> None:
    """Fault suites: a live deck PUT applied but unanswered (no change published for revision 1); the
    retry's change said from 1 to 2 and the digest sent "1..2": once recorded, revision 1 counted as
    seen though the agent was never shown it ("deck revisions 0..1 never delivered", misacknowledged)."""
    await go_live(redis_client, builder)
    await builder.on_change(doc_change("user", 2, deck(card_1="Retried")))  # from_revision=1, never published
    await wait_for(lambda: _count(redis_client, 1))
    [inj] = await injections(redis_client)
    assert (inj.from_revision, inj.to_revision) == (0, 2)
    assert inj.injection.content.startswith(f'<artifact_update ref="{DOC}" from_revision="0" to_revision="2">')
    await builder.on_recorded(recorded(inj))
    state = await builder.revisions.load(SID, DOC)
    assert state is not None and state.seen == 2 and not state.notes
