"""Contract of `gamma:notifications`: producers -> notifications (group `notifications`); the same
body as `POST /notifications`."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from services.proxy.rows import create_row
from shared.contracts.http import ModelConfig
from shared.contracts.streams.notifications import NOTIFICATION_ADAPTER, NotificationSubmit
from shared.redis import keys
from shared.streams.bus import publish
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip, pel_empty
from tests.support.inproc import connected_broker, running, settings_for
from tests.support.polling import eventually

NOTIFICATIONS = [
    {"id": "n1", "type": "import.completed",
     "payload": {"importId": "i1", "sourceRef": "file:in.pptx", "outputRefs": ["gamma:file:deck1"]}},
    {"id": "n2", "type": "render.completed",
     "payload": {"renderId": "r1", "ref": "gamma:file:deck1", "status": "failed", "error": "font missing"}},
    {"id": "n3", "type": "export.completed",
     "payload": {"exportId": "x1", "ref": "gamma:file:deck1", "format": "pdf", "outputRef": "file:deck.pdf"}},
    {"id": "n4", "type": "approval.resolved",
     "payload": {"approvalId": "a1", "decision": "approved", "subject": "publish", "comment": "ok"}},
]


async def test_every_notification_type_round_trips(redis_url: str, redis_client: aioredis.Redis) -> None:
    messages = [
        NotificationSubmit(session_id="s1", notification=NOTIFICATION_ADAPTER.validate_python(n)) for n in NOTIFICATIONS
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.NOTIFICATIONS, groups=["notifications"],
                            model=NotificationSubmit, messages=messages)


async def test_invalid_notification_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    good = NotificationSubmit.model_validate({"session_id": "s1", "notification": NOTIFICATIONS[0]})
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.NOTIFICATIONS, group="notifications", model=NotificationSubmit,
        bad_bodies=[
            {"session_id": "s1", "notification": {"id": "n5", "type": "weather.changed", "payload": {}}},
            {"session_id": "../etc", "notification": NOTIFICATIONS[1]},
            {"session_id": "s1", "notification": {**NOTIFICATIONS[2], "id": "bad id with spaces"}},
        ],
        valid=good,
    )
    assert "weather.changed" in letters[0].error
    assert "session_id" in letters[1].error


async def test_stream_intake_to_the_real_notifications_service(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """Producer: an external service XADDs through `shared.streams.bus.publish`; consumer: the notifications
    app itself (its subscription and `on_submit`). A dormant session keeps every type pending."""
    from services.notifications.app import create_app
    from services.notifications.store import NotificationStore

    settings = settings_for(redis_url, tmp_path)
    row = await create_row(redis_client, "alice", "base", ModelConfig())
    messages = [
        NotificationSubmit(session_id=row.id, notification=NOTIFICATION_ADAPTER.validate_python(n)) for n in NOTIFICATIONS
    ]
    store = NotificationStore(redis_client)
    async with running(create_app, settings), connected_broker(redis_url) as producer:
        for msg in messages:
            await publish(producer, keys.NOTIFICATIONS, msg)

        async def all_pending() -> bool:
            return all([await store.status(row.id, n["id"]) == "pending" for n in NOTIFICATIONS])

        await eventually(all_pending, what="every notification type stored as pending")
        await eventually(pel_empty(redis_client, keys.NOTIFICATIONS, "notifications"), what="acks")
    assert await redis_client.xlen(keys.DEADLETTER) == 0
