"""Contract of `gamma:{sid}:events`: runtime -> proxy SSE (no group; `XADD MAXLEN ~ 10000 * data <JSON>`,
the entry id is the SSE id). The runtime is the only writer and the proxy forwards entries verbatim,
so an invalid event is the runtime's bug: the model rejects it loudly (below), the proxy skips entries
without `data`, and no dead-lettering applies to this group-less fan-out stream."""

from __future__ import annotations

import typing

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from services.proxy.fanout import EventFanout
from services.proxy.routes.events import event_frames
from services.runtime.live.events import Outbox
from services.runtime.live.sender import EventSender
from shared.contracts.records.spend import BudgetReachedData
from shared.contracts.streams.events import (
    AuditData,
    ChecklistData,
    EventEntry,
    EventType,
    MessageUserData,
    ModelRequestData,
    ReasoningUpdateData,
    RunAbortedData,
    SessionEvent,
    StatusData,
    ToolCallProgressData,
    ViewableFilesData,
)
from shared.redis import keys

SID = "s_events"


async def sse_events(client: aioredis.Redis, start: str, n: int) -> list[tuple[str, SessionEvent]]:
    """The proxy's real SSE generator (replay, then its fan-out), parsed the way an EventSource does."""
    fanout = EventFanout(client, client, block_ms=500, queue_size=100)
    out: list[tuple[str, SessionEvent]] = []
    frames = event_frames(fanout, client, SID, "alice", start)
    try:
        async for frame in frames:
            text = frame.decode()
            if text.startswith("id: "):
                lines = text.strip("\n").split("\n")
                entry_id = lines[0][len("id: "):]
                data = "\n".join(line[len("data: "):] for line in lines[1:] if line.startswith("data: "))
                out.append((entry_id, SessionEvent.model_validate_json(data)))
            if len(out) >= n:
                break
    finally:
        await frames.aclose()
        await fanout.close()
    return out


def typed_data(event: SessionEvent) -> object:
    return {"message_user": MessageUserData, "status": StatusData, "model_request": ModelRequestData,
            "checklist": ChecklistData, "audit": AuditData, "run_aborted": RunAbortedData,
            "reasoning_update": ReasoningUpdateData, "tool_call_progress": ToolCallProgressData,
            "budget_reached": BudgetReachedData, "viewable_files": ViewableFilesData}.get(event.type, dict)


async def test_every_event_type_round_trips(redis_client: aioredis.Redis) -> None:
    """Producer: the runtime's `Outbox.event`; consumer: the proxy's SSE generator `event_frames`."""
    data: dict[str, dict[str, object]] = {
        "message_user": {"message": "Which theme?", "block_on_user": True, "tool_call_id": "call_1"},
        "status": {"status": "live", "running": True, "fence": 4, "run_id": "run_ab12"},
        "run_aborted": {"run_id": "run_ab12", "reason": "user", "kept": 1},
        "model_request": {"prefix_sha256": "ab" * 32, "prompt_tokens": 900, "shared_prefix_tokens": 800,
                          "encoding": "o200k_base", "message_count": 5},
        "checklist": {"workflow": "deck-generation", "current": 2, "total": 3, "done": 1, "steps": [
            {"id": "brief", "title": "Write the brief", "kind": "required", "status": "done"},
            {"id": "validate", "title": "Validate", "kind": "verification", "status": "pending"},
            {"id": "research", "title": "Research", "kind": "optional", "status": "pending"}]},
        "audit": {"workflow": "deck-generation", "outcome": "blocked", "missing": ["validate"],
                  "tool_call_id": "call_2"},
        "reasoning_update": {"delta": "Plan: read the brief first.", "item_id": "rs_1", "summary_index": 0},
        "tool_call_progress": {"tool_call_id": "call_3", "tool_name": "write", "bytes": 4096},
        "budget_reached": {"cap": "session_usd", "spent": 0.42, "limit": 0.5, "message": "The run stopped."},
        "viewable_files": {"added": ["brief.xml"], "removed": ["old.md"], "count": 4, "truncated": False},
    }

    async def no_bus(stream: str, message: BaseModel) -> None:
        raise AssertionError("events never go through the bus")

    outbox = Outbox(EventSender(redis_client), SID, no_bus)
    outbox.for_run("run_ab12")  # as during a run: every event carries it
    types = typing.get_args(EventType)
    ids = [await outbox.event(t, data.get(t, {"n": i})) for i, t in enumerate(types)]
    got = await sse_events(redis_client, "0", len(types))
    assert [entry_id for entry_id, _ in got] == ids  # the SSE id is the stream entry id
    assert [e.type for _, e in got] == list(types)
    for (_, event), t in zip(got, types, strict=True):
        assert event.session_id == SID and event.run_id == "run_ab12"
        assert event.data == data.get(t, {"n": types.index(t)})
        model = typed_data(event)
        if model is not dict:
            model.model_validate(event.data)  # type: ignore[attr-defined]
    # Resumable like SSE's Last-Event-ID: everything strictly after an id.
    after = await sse_events(redis_client, ids[4], len(types) - 5)
    assert [entry_id for entry_id, _ in after] == ids[5:]


async def test_entry_without_data_is_skipped_and_the_stream_goes_on(redis_client: aioredis.Redis) -> None:
    async def no_bus(stream: str, message: BaseModel) -> None:
        raise AssertionError("unused")

    outbox = Outbox(EventSender(redis_client), SID, no_bus)
    await redis_client.xadd(keys.events(SID), {"junk": "x"})
    good = await outbox.event("status", {"status": "dormant", "running": False})
    [(entry_id, event)] = await sse_events(redis_client, "0", 1)
    assert entry_id == good and event.type == "status"


async def test_the_runtime_caps_the_events_stream(redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """`MAXLEN ~`: trimming happens (approximately, whole nodes at a time), so a long session's events
    stream stays bounded."""
    from services.runtime.live import sender

    assert sender.EVENTS_MAXLEN == 10_000
    monkeypatch.setattr(sender, "EVENTS_MAXLEN", 10)

    async def no_bus(stream: str, message: BaseModel) -> None:
        raise AssertionError("unused")

    outbox = Outbox(EventSender(redis_client), SID, no_bus)
    for i in range(400):
        await outbox.event("status", {"n": i})
    assert await redis_client.xlen(keys.events(SID)) < 400


async def test_a_traced_runs_events_carry_its_traceparent_beside_the_json(redis_client: aioredis.Redis) -> None:
    """While the run span is recorded the supervisor sets `Outbox.traceparent`: every event of the
    run, queued progress or awaited, has it in the entry's `traceparent` field (the proxy's SSE
    delivery span continues it); the SSE `data:` stays the event JSON alone. Without it, no field."""
    async def no_bus(stream: str, message: BaseModel) -> None:
        raise AssertionError("unused")

    parent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    outbox = Outbox(EventSender(redis_client, 0.01), SID, no_bus)
    outbox.for_run(None, parent)
    await outbox.event("message_update", {"delta": "a"}, wait=False)
    await outbox.event("message_update", {"delta": "b"}, wait=False)
    await outbox.event("status", {"status": "live", "running": True})
    outbox.for_run(None)
    await outbox.event("status", {"status": "live", "running": False})
    entries = [EventEntry.model_validate({k.decode(): v.decode() for k, v in f.items()})
               for _, f in await redis_client.xrange(keys.events(SID))]
    assert [e.traceparent for e in entries] == [parent, parent, None]
    assert SessionEvent.model_validate_json(entries[0].data).data == {"delta": "ab"}  # merged, one entry
    got = await sse_events(redis_client, "0", 3)
    assert [e.type for _, e in got] == ["message_update", "status", "status"]
    with pytest.raises(ValueError, match="traceparent"):
        EventEntry(data="{}", traceparent="00-not-a-trace")


def test_invalid_event_is_rejected_with_a_clear_error() -> None:
    for raw, needle in [(b'{"type": "telepathy", "session_id": "s"}', "type"),
                        (b'{"type": "status"}', "session_id"),
                        (b"\xff", "Invalid JSON")]:
        try:
            SessionEvent.model_validate_json(raw)
        except ValueError as exc:
            assert needle in str(exc)
        else:
            raise AssertionError(f"{raw!r} was accepted")


def test_stream_event_data_contracts_refuse_what_they_do_not_define() -> None:
    """`reasoning_update` and `tool_call_progress` data: typed, no stray fields, no negative counts."""
    from pydantic import ValidationError

    assert ReasoningUpdateData(delta="x").summary_index == 0
    for bad in ({"delta": "x", "summary_index": -1}, {"delta": "x", "extra": 1}, {}):
        with pytest.raises(ValidationError):
            ReasoningUpdateData.model_validate(bad)
    for bad in ({"tool_call_id": "c", "tool_name": "write", "bytes": -1}, {"tool_call_id": "c", "bytes": 1}):
        with pytest.raises(ValidationError):
            ToolCallProgressData.model_validate(bad)
