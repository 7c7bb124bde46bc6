"""Contract of `gamma:compaction:requests`: runtime -> compaction (group `compaction`)."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis
from pydantic import BaseModel

from services.runtime.live.events import Outbox
from services.runtime.live.sender import EventSender
from services.runtime.runs.compaction_trigger import make_request
from shared.contracts.records.messages import AssistantMessage, TextContent, UserMessage
from shared.contracts.records.transcript import MessageEntry, SessionHeader, TranscriptEntry
from shared.contracts.streams.compaction import CompactionRequest
from shared.contracts.streams.inbox import CompactionReady
from shared.redis import keys
from shared.storage.disk import append_jsonl, session_paths
from shared.streams.bus import publish
from shared.streams.inbox import InboxReader
from tests.support.contract import assert_invalid_dead_lettered, assert_round_trip, pel_empty
from tests.support.inproc import connected_broker, running, settings_for
from tests.support.polling import eventually


async def test_compaction_requests_round_trip(redis_url: str, redis_client: aioredis.Redis) -> None:
    messages = [
        CompactionRequest(session_id="s1", upto_entry_id="e10", first_kept_entry_id="e8", tokens_before=120_000),
        CompactionRequest(session_id="s1", upto_entry_id="e20", first_kept_entry_id="e18",
                          previous_summary="## Goal\nship", previous_details={"readFiles": ["a.txt"]},
                          custom_instructions="keep the deck outline", model="gpt-5-mini", reserve_tokens=8000),
    ]
    await assert_round_trip(redis_url, redis_client, stream=keys.COMPACTION_REQUESTS, groups=["compaction"],
                            model=CompactionRequest, messages=messages)


async def test_invalid_compaction_request_is_dead_lettered(redis_url: str, redis_client: aioredis.Redis) -> None:
    letters = await assert_invalid_dead_lettered(
        redis_url, redis_client, stream=keys.COMPACTION_REQUESTS, group="compaction", model=CompactionRequest,
        bad_bodies=[{"session_id": "s1", "upto_entry_id": "e1"}],
        valid=CompactionRequest(session_id="s1", upto_entry_id="e1", first_kept_entry_id="e1"),
    )
    assert "first_kept_entry_id" in letters[0].error


def write_transcript(data_dir: Path, sid: str) -> list[TranscriptEntry]:
    """A transcript as the runtime writes it: header, then alternating user / assistant messages."""
    entries: list[TranscriptEntry] = [SessionHeader(id="h0", timestamp="2026-01-01T00:00:00Z")]
    parent = "h0"
    for i in range(12):
        message: UserMessage | AssistantMessage = (
            UserMessage(content=f"question {i}: " + "words " * 200) if i % 2 == 0
            else AssistantMessage(content=[TextContent(text=f"answer {i}: " + "more " * 200)])
        )
        entries.append(MessageEntry(id=f"e{i}", parent_id=parent, timestamp="2026-01-01T00:00:01Z", message=message))
        parent = f"e{i}"
    append_jsonl(session_paths(data_dir, sid).transcript, [e.model_dump(mode="json", by_alias=True) for e in entries])
    return entries


async def test_runtime_request_is_answered_by_the_real_compaction_service(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """Producer: the runtime's `make_request` sent through its `Outbox.publish`; consumer: the
    compaction app (its subscription and handler, scripted model), whose `CompactionReady` comes back
    through the session inbox to the runtime's `InboxReader`."""
    from services.compaction.app import create_app

    sid = "s_compact1"
    entries = write_transcript(tmp_path, sid)
    request = make_request(sid, entries, keep_recent_tokens=400)
    assert request is not None
    reader = InboxReader(redis_client, "runtime-contract")
    await reader.add(sid)
    async with running(create_app, settings_for(redis_url, tmp_path)), connected_broker(redis_url) as broker:
        async def bus(stream: str, message: BaseModel) -> None:
            await publish(broker, stream, message)

        await Outbox(EventSender(redis_client), sid, bus).publish(keys.COMPACTION_REQUESTS, request)
        got = await eventually(lambda: reader.read(block_ms=200), timeout=60, what="CompactionReady in the inbox")
        await eventually(pel_empty(redis_client, keys.COMPACTION_REQUESTS, "compaction"), what="acks")
    [entry] = got
    ready = entry.message
    assert isinstance(ready, CompactionReady)
    assert (ready.request_id, ready.upto_entry_id, ready.first_kept_entry_id) == (
        request.request_id, request.upto_entry_id, request.first_kept_entry_id)
    assert ready.error is None and ready.summary
    assert await redis_client.xlen(keys.DEADLETTER) == 0
