"""The digest's flush on request (causal order, services/digest/flush.py) against a real Redis and a
real session disk: what a waiting prompt needs goes out at once, in order, and nothing after it."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from services.digest.builder import DigestBuilder
from services.digest.flush import Flusher
from shared.contracts.streams.inbox import INBOX_ADAPTER, ChangesSettled, InboxMessage, Injection
from shared.redis import keys
from shared.streams import causal
from tests.integration.test_digest_builder import DOC, SID, deck, doc_change, go_live


async def inbox(client: aioredis.Redis) -> list[InboxMessage]:
    return [INBOX_ADAPTER.validate_json(fields[b"data"]) for _, fields in await client.xrange(keys.inbox(SID))]


async def agent_wrote(builder: DigestBuilder) -> None:
    """The agent made the deck: the agent has seen revision 1, so user edits are diffed against it."""
    await builder.on_change(doc_change("agent", 1, deck()))


async def user_change(client: aioredis.Redis, builder: DigestBuilder, rev: int, title: str) -> int:
    seq = await causal.register(client, SID, DOC)
    await builder.on_change(doc_change("user", rev, deck(card_2=title), seq=seq))
    return seq


async def test_flush_sends_the_debounced_digest_now_then_settled(redis_client: aioredis.Redis, tmp_path: Path) -> None:
    builder = DigestBuilder(redis_client, tmp_path, debounce_ms=60_000)
    flusher = Flusher(builder)
    await go_live(redis_client, builder)
    await agent_wrote(builder)
    seq = await user_change(redis_client, builder, 2, "first")
    assert await inbox(redis_client) == []  # debounced for a minute
    assert await causal.in_flight(redis_client, SID) == [(seq, DOC)]
    assert await flusher.settle(SID, seq)
    got = await inbox(redis_client)
    assert [type(m) for m in got] == [Injection, ChangesSettled]
    assert isinstance(got[0], Injection) and got[0].to_revision == 2 and "first" in got[0].injection.content
    assert await causal.in_flight(redis_client, SID) == []
    await builder.flush(SID, DOC)  # the debounce ends later: nothing more to send
    assert len(await inbox(redis_client)) == 2


async def test_a_change_after_the_watermark_stays_due_and_follows(redis_client: aioredis.Redis, tmp_path: Path) -> None:
    builder = DigestBuilder(redis_client, tmp_path, debounce_ms=60_000)
    flusher = Flusher(builder)
    await go_live(redis_client, builder)
    await agent_wrote(builder)
    before = await user_change(redis_client, builder, 2, "before the prompt")
    after = await user_change(redis_client, builder, 3, "after the prompt")
    assert await flusher.settle(SID, before)
    got = await inbox(redis_client)
    assert [type(m) for m in got] == [Injection, ChangesSettled]
    first = got[0]
    assert isinstance(first, Injection) and first.to_revision == 2 and first.source_id == f"{DOC}@2"
    assert "before the prompt" in first.injection.content and "after the prompt" not in first.injection.content
    assert await causal.in_flight(redis_client, SID) == [(after, DOC)]  # still owed to the agent
    await builder.flush(SID, DOC)  # its debounce ends: the rest goes out, and leaves the set
    rest = (await inbox(redis_client))[2:]
    assert len(rest) == 1 and isinstance(rest[0], Injection) and rest[0].to_revision == 3
    assert await causal.in_flight(redis_client, SID) == []


async def test_a_change_not_handled_yet_leaves_the_flush_owed(redis_client: aioredis.Redis, tmp_path: Path) -> None:
    builder = DigestBuilder(redis_client, tmp_path, debounce_ms=60_000)
    flusher = Flusher(builder)
    await go_live(redis_client, builder)
    seq = await causal.register(redis_client, SID, DOC)  # acknowledged, still on the changes stream
    assert not await flusher.settle(SID, seq)
    assert await redis_client.get(keys.digest_flush(SID)) == str(seq).encode()
    assert await inbox(redis_client) == []
    await builder.on_change(doc_change("user", 1, deck(card_2="late"), seq=seq))  # (a dirty marker: no base)  # handled: the debt is paid
    got = await inbox(redis_client)
    assert [type(m) for m in got] == [Injection, ChangesSettled]
    assert not await redis_client.exists(keys.digest_flush(SID))


async def test_dormant_changes_leave_the_set_once_in_the_manifest(redis_client: aioredis.Redis, tmp_path: Path) -> None:
    builder = DigestBuilder(redis_client, tmp_path, debounce_ms=60_000)
    await user_change(redis_client, builder, 1, "while dormant")  # no lease: straight into the manifest
    assert builder.manifest.get(SID, DOC) is not None
    assert await causal.in_flight(redis_client, SID) == []
