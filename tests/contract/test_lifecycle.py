"""Contract of `gamma:lifecycle`: runtime -> notifications and digest (a group each)."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis
from pydantic import BaseModel

from services.proxy.rows import create_row
from services.runtime.live.events import Outbox
from services.runtime.live.sender import EventSender
from shared.contracts.http import ModelConfig
from shared.contracts.streams.inbox import Barrier, InboxMessage, Injection
from shared.contracts.streams.lifecycle import LIFECYCLE_ADAPTER, SessionDormant, SessionLive
from shared.contracts.streams.notifications import NotificationSubmit
from shared.redis import keys
from shared.streams.bus import publish
from shared.streams.inbox import InboxReader
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip, pel_empty
from tests.support.inproc import connected_broker, running, settings_for
from tests.support.polling import eventually

GROUPS = ["notifications", "digest"]


async def test_both_lifecycle_members_reach_both_groups(redis_url: str, redis_client: aioredis.Redis) -> None:
    messages = [
        SessionLive(session_id="s1", wake_id="w1", fence=3, worker_id="runtime-a"),
        SessionDormant(session_id="s1", fence=3),
        SessionDormant(session_id="s2", fence=7, reason="suspend"),
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.LIFECYCLE, groups=GROUPS, model=LIFECYCLE_ADAPTER,
                            messages=messages)


async def test_invalid_lifecycle_event_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.LIFECYCLE, group="digest", model=LIFECYCLE_ADAPTER,
        bad_bodies=[
            {"type": "session_exploded", "session_id": "s1", "fence": 1},
            {"type": "session_live", "session_id": "s1", "fence": 1},  # no wake_id / worker_id
            {"session_id": "s1", "fence": 1},  # no discriminator
        ],
        valid=SessionDormant(session_id="s1", fence=1),
    )
    assert "session_exploded" in letters[0].error
    assert "wake_id" in letters[1].error


async def test_runtime_announcement_reaches_the_real_notifications_service(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """Producer: the runtime's `Outbox.publish` (its bus callback is `shared.streams.bus.publish`, as in the
    runtime app); consumer: the notifications app, which answers a `SessionLive` with the pending
    notification's injections and a `Barrier` carrying the wake id, read back with the runtime's
    `InboxReader`. A `SessionDormant` is consumed (acked) without effect."""
    from services.notifications.app import create_app
    from services.notifications.delivery import Delivery

    row = await create_row(redis_client, "alice", "base", ModelConfig())
    submit = NotificationSubmit.model_validate({"session_id": row.id, "notification": {
        "id": "n-live", "type": "approval.resolved",
        "payload": {"approvalId": "a1", "decision": "approved", "subject": "publish"}}})
    assert (await Delivery(redis_client).submit(submit)).status == "pending"
    reader = InboxReader(redis_client, "runtime-contract")
    await reader.add(row.id)
    async with running(create_app, settings_for(redis_url, tmp_path)), connected_broker(redis_url) as broker:
        async def bus(stream: str, message: BaseModel) -> None:
            await publish(broker, stream, message)

        outbox = Outbox(EventSender(redis_client), row.id, bus)
        await outbox.publish(keys.LIFECYCLE, SessionLive(session_id=row.id, wake_id="w-42", fence=1, worker_id="rt-1"))
        got: list[InboxMessage] = []

        async def barrier() -> bool:
            got.extend(e.message for e in await reader.read(block_ms=200))
            return any(isinstance(m, Barrier) for m in got)

        await eventually(barrier, timeout=30, what="the Barrier after SessionLive")
        await outbox.publish(keys.LIFECYCLE, SessionDormant(session_id=row.id, fence=1))
        await eventually(pel_empty(redis_client, keys.LIFECYCLE, "notifications"), what="acks")
    injections = [m for m in got if isinstance(m, Injection)]
    assert [i.source_id for i in injections] == ["n-live"]
    assert isinstance(got[-1], Barrier) and got[-1].wake_id == "w-42"
    assert await redis_client.xlen(keys.DEADLETTER) == 0
