"""Contract of `gamma:{sid}:events`: runtime -> proxy SSE (no group; `XADD MAXLEN ~ 10000 * data <JSON>`,
the entry id is the SSE id)."""

from __future__ import annotations

import typing

import redis.asyncio as aioredis

from shared import keys
from shared.contracts.events import EventType, MessageUserData, ModelRequestData, SessionEvent, StatusData

SID = "s_events"


async def publish_event(client: aioredis.Redis, event: SessionEvent) -> str:
    """The wire format of docs/integration.md ("Wire formats")."""
    entry_id = await client.xadd(keys.events(event.session_id), {"data": event.model_dump_json()}, maxlen=10_000,
                                 approximate=True)
    return entry_id.decode()


def decode_event(fields: dict[bytes, bytes]) -> SessionEvent:
    return SessionEvent.model_validate_json(fields[b"data"])


def typed_data(event: SessionEvent) -> object:
    return {"message_user": MessageUserData, "status": StatusData, "model_request": ModelRequestData}.get(
        event.type, dict
    )


async def test_every_event_type_round_trips(redis_client: aioredis.Redis) -> None:
    data: dict[str, dict[str, object]] = {
        "message_user": {"message": "Which theme?", "block_on_user": True, "tool_call_id": "call_1"},
        "status": {"status": "live", "running": True, "fence": 4},
        "model_request": {"prefix_sha256": "ab" * 32, "prompt_tokens": 900, "shared_prefix_tokens": 800,
                          "encoding": "o200k_base", "message_count": 5},
    }
    sent = [SessionEvent(type=t, session_id=SID, data=data.get(t, {"n": i}))
            for i, t in enumerate(typing.get_args(EventType))]
    ids = [await publish_event(client=redis_client, event=e) for e in sent]
    entries = await redis_client.xrange(keys.events(SID))
    assert [e[0].decode() for e in entries] == ids
    got = [decode_event(f) for _, f in entries]
    assert got == sent
    for event in got:
        model = typed_data(event)
        if model is not dict:
            model.model_validate(event.data)  # type: ignore[attr-defined]
    # Resumable like SSE's Last-Event-ID: everything strictly after an id.
    after = await redis_client.xrange(keys.events(SID), min="(" + ids[4])
    assert [decode_event(f) for _, f in after] == sent[5:]


async def test_events_stream_is_capped(redis_client: aioredis.Redis) -> None:
    for _ in range(3):
        await redis_client.xadd(keys.events(SID), {"data": "{}"}, maxlen=2, approximate=False)
    assert await redis_client.xlen(keys.events(SID)) == 2


def test_invalid_event_is_rejected_with_a_clear_error() -> None:
    for raw, needle in [(b'{"type": "telepathy", "session_id": "s"}', "type"),
                        (b'{"type": "status"}', "session_id"),
                        (b"\xff", "Invalid JSON")]:
        try:
            decode_event({b"data": raw})
        except ValueError as exc:
            assert needle in str(exc)
        else:
            raise AssertionError(f"{raw!r} was accepted")
