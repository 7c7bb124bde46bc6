"""Contract of `gamma:digest:flush`: runtime -> digest (group `digest`), answered in the inbox with the
flushed digests, then `ChangesSettled` (causal order, shared/streams/causal.py)."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis
from pydantic import BaseModel

from services.runtime.live.events import Outbox
from services.runtime.live.sender import EventSender
from shared.contracts.streams.artifacts import ArtifactChange
from shared.contracts.streams.causal import FlushRequest
from shared.contracts.streams.inbox import ChangesSettled, Injection
from shared.redis import keys
from shared.streams import causal
from shared.streams.bus import publish
from shared.streams.inbox import InboxReader
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip, pel_empty
from tests.support.inproc import connected_broker, running, settings_for
from tests.support.polling import eventually


async def test_digest_flush_round_trip(redis_url: str, redis_client: aioredis.Redis) -> None:
    messages = [FlushRequest(session_id="s1", upto=1), FlushRequest(session_id="s1", upto=9_000_000_000)]
    await assert_round_trip(redis_url, redis_client, stream=keys.DIGEST_FLUSH, groups=["digest"],
                            model=FlushRequest, messages=messages)


async def test_invalid_flush_request_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.DIGEST_FLUSH, group="digest", model=FlushRequest,
        bad_bodies=[{"session_id": "s1", "upto": 0}], valid=FlushRequest(session_id="s1", upto=1),
    )
    assert "upto" in letters[0].error


async def test_runtime_flush_request_is_answered_by_the_real_digest(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """A live session (a lease and the digest's SessionLive fence) with a user change in flight and a
    debounce far longer than the test: the runtime's `FlushRequest` (through its `Outbox.publish`) makes
    the digest send the update at once, then `ChangesSettled`, and the change leaves the in-flight set."""
    from services.digest.app import create_app

    sid = "s_flush1"
    await redis_client.set(keys.lease(sid), "w1:1")
    await redis_client.hset(keys.digest_live(sid), mapping={"fence": "1", "since": "0"})
    reader = InboxReader(redis_client, "runtime-contract")
    await reader.add(sid)
    settings = settings_for(redis_url, tmp_path, GAMMA_DIGEST_DEBOUNCE_MS=60_000)
    async with running(create_app, settings), connected_broker(redis_url) as broker:
        seq = await causal.register(redis_client, sid, "gamma:file:d1")
        await publish(broker, keys.ARTIFACT_CHANGES, ArtifactChange(
            session_id=sid, ref="gamma:file:d1", actor="user", kind="document", to_revision=1,
            document={"title": "t", "cards": [{"id": "c1", "title": "one"}]}, seq=seq))
        await eventually(pel_empty(redis_client, keys.ARTIFACT_CHANGES, "digest"), what="change handled")
        assert await causal.in_flight(redis_client, sid) == [(seq, "gamma:file:d1")]  # debounced: still in flight

        async def bus(stream: str, message: BaseModel) -> None:
            await publish(broker, stream, message)

        await Outbox(EventSender(redis_client), sid, bus).publish(keys.DIGEST_FLUSH, FlushRequest(session_id=sid, upto=seq))
        got: list = []

        async def settled() -> bool:
            got.extend(await reader.read(block_ms=200))
            return any(isinstance(e.message, ChangesSettled) for e in got)

        await eventually(settled, timeout=30, what="ChangesSettled in the inbox")
        await eventually(pel_empty(redis_client, keys.DIGEST_FLUSH, "digest"), what="acks")
    kinds = [type(e.message) for e in got]
    assert kinds == [Injection, ChangesSettled], kinds
    update, done = got[0].message, got[1].message
    assert isinstance(update, Injection) and update.ref == "gamma:file:d1" and update.to_revision == 1
    assert isinstance(done, ChangesSettled) and done.upto == seq
    assert await causal.in_flight(redis_client, sid) == []
    assert await redis_client.xlen(keys.DEADLETTER) == 0
