"""Contract of `gamma:injections:recorded`: runtime -> notifications and digest (a group each)."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis
from pydantic import BaseModel

from services.proxy.rows import create_row
from services.runtime.live.events import Outbox
from services.runtime.live.sender import EventSender
from shared.contracts.http import ModelConfig
from shared.contracts.streams.inbox import Injection
from shared.contracts.streams.notifications import NotificationSubmit
from shared.contracts.streams.recorded import InjectionRecorded
from shared.redis import keys
from shared.streams.bus import publish
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip, pel_empty
from tests.support.inproc import connected_broker, running, settings_for
from tests.support.polling import eventually

GROUPS = ["notifications", "digest"]


async def test_recorded_injections_of_every_source_reach_both_groups(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    messages = [
        InjectionRecorded(session_id="s1", source="notification", source_id="n1", entry_id="e1"),
        InjectionRecorded(session_id="s1", source="notification", source_id="n1#1", entry_id="e2"),
        InjectionRecorded(session_id="s1", source="artifact", source_id="file:brief.xml@5", entry_id="e3",
                          ref="file:brief.xml", to_revision=5),
        InjectionRecorded(session_id="s1", source="client", source_id="p_1", entry_id="e4"),
        InjectionRecorded(session_id="s1", source="system", source_id="todo", entry_id="e5"),
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.INJECTIONS_RECORDED, groups=GROUPS,
                            model=InjectionRecorded, messages=messages)


async def test_invalid_recorded_injection_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.INJECTIONS_RECORDED, group="notifications", model=InjectionRecorded,
        bad_bodies=[
            {"session_id": "s1", "source": "rumour", "source_id": "x", "entry_id": "e"},
            {"session_id": "s1", "source": "artifact", "source_id": "x"},
        ],
        valid=InjectionRecorded(session_id="s1", source="notification", source_id="n9", entry_id="e9"),
    )
    assert "source" in letters[0].error
    assert "entry_id" in letters[1].error


async def test_runtime_record_settles_the_real_notifications_service(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """Producer: the runtime's `Outbox.publish`; consumer: the notifications app, which marks a
    delivered notification consumed once every part of it is recorded."""
    from services.notifications.app import create_app
    from services.notifications.delivery import Delivery
    from services.notifications.store import NotificationStore

    row = await create_row(redis_client, "alice", "base", ModelConfig())
    await redis_client.set(keys.lease(row.id), "rt-1:1")  # live: the submit delivers at once
    submit = NotificationSubmit.model_validate({"session_id": row.id, "notification": {
        "id": "n-rec", "type": "import.completed",
        "payload": {"importId": "i1", "sourceRef": "file:in.pptx", "outputRefs": ["gamma:file:d1"]}}})
    assert (await Delivery(redis_client).submit(submit)).status == "delivered"
    parts = [f[b"data"] for _, f in await redis_client.xrange(keys.inbox(row.id))]
    source_ids = [Injection.model_validate_json(p).source_id for p in parts]
    assert source_ids and source_ids[0] == "n-rec"
    store = NotificationStore(redis_client)
    async with running(create_app, settings_for(redis_url, tmp_path)), connected_broker(redis_url) as broker:
        async def bus(stream: str, message: BaseModel) -> None:
            await publish(broker, stream, message)

        outbox = Outbox(EventSender(redis_client), row.id, bus)
        for i, source_id in enumerate(source_ids):
            await outbox.publish(keys.INJECTIONS_RECORDED, InjectionRecorded(
                session_id=row.id, source="notification", source_id=source_id, entry_id=f"e{i}"))

        async def consumed() -> bool:
            return await store.status(row.id, "n-rec") == "consumed"

        await eventually(consumed, what="the notification consumed after its parts were recorded")
        await eventually(pel_empty(redis_client, keys.INJECTIONS_RECORDED, "notifications"), what="acks")
    assert await redis_client.xlen(keys.DEADLETTER) == 0
