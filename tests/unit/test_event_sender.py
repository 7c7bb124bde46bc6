"""The worker's EventSender (services/runtime/live/sender.py), the one owner of the sessions' event
order: streamed text merged per tick in one pipeline for all sessions, other progress at once, an
awaited event after everything queued before it, fencing, and a failed send kept for the next
awaited event. Against recorded pipelines, no Redis."""

from __future__ import annotations

import asyncio

import pytest

from services.runtime.live.lease import LeaseLost
from services.runtime.live.sender import EventSender, SessionQueue, Text, text_event_json
from shared.contracts.streams.events import EventType, SessionEvent
from shared.redis import keys
from tests.support.pipelines import FakePipelines
from tests.support.polling import eventually


def ev(sid: str, type: EventType = "message_update", **data: object) -> SessionEvent:
    return SessionEvent(type=type, session_id=sid, data=dict(data))


class Fence:
    def __init__(self) -> None:
        self.held = True

    async def __call__(self) -> None:
        if not self.held:
            raise LeaseLost("s")


def delta(sender: EventSender, q: SessionQueue, sid: str, text: str) -> None:
    sender.enqueue_text(q, text, None)


async def test_deltas_of_every_session_merge_into_one_pipeline_per_tick() -> None:
    redis = FakePipelines()
    sender = EventSender(redis, 0.02)
    queues = {sid: sender.queue(sid, Fence()) for sid in ("a", "b", "c")}
    for n in range(5):
        for sid, q in queues.items():
            delta(sender, q, sid, f"{n}")

    async def sent() -> bool:
        return all(redis.text(keys.events(sid)) == "01234" for sid in queues)
    await eventually(sent, what="the merged deltas")
    assert len(redis.pipelines) == 1 and len(redis.pipelines[0]) == 3  # one event per session, one round trip
    assert sender.ticks == 1 and redis.scripts == 1  # as one command
    await sender.close()


async def test_other_progress_goes_at_once_and_keeps_its_place_among_the_deltas() -> None:
    redis = FakePipelines()
    sender = EventSender(redis, 60.0)  # a tick far beyond the test's timeout
    q = sender.queue("s", Fence())
    sender.enqueue(q, ev("s", "message_start"), None)
    delta(sender, q, "s", "a")
    delta(sender, q, "s", "b")  # merged with "a": still unsent
    await eventually(lambda: asyncio.sleep(0, result=redis.pipelines), what="the message_start, at once")
    sender.enqueue(q, ev("s", "message_update", restart=True), None)  # not a delta: kept apart
    delta(sender, q, "s", "c")
    entry = await sender.send(q, ev("s", "message_end"), None, fenced=True)
    got = redis.events(keys.events("s"))
    assert [(e["type"], e["data"]) for e in got] == [
        ("message_start", {}), ("message_update", {"delta": "ab"}), ("message_update", {"restart": True}),
        ("message_update", {"delta": "c"}), ("message_end", {})]
    assert entry == "5-0"  # the awaited event's own entry id
    await sender.close()


async def test_without_a_window_nothing_merges_and_nothing_waits_for_a_tick() -> None:
    redis = FakePipelines()
    sender = EventSender(redis, 0.0)
    queues = [sender.queue(sid, Fence()) for sid in ("a", "b")]
    for n in range(3):
        for q in queues:
            delta(sender, q, q.sid, str(n))
    await eventually(lambda: asyncio.sleep(0, result=len(redis.events(keys.events("b"))) == 3),
                     what="every delta as its own event")
    assert [e["data"]["delta"] for e in redis.events(keys.events("a"))] == ["0", "1", "2"]
    assert len(redis.pipelines) == 1  # the sessions that queued in one turn of the loop share it
    assert sender.ticks == 0 and sender.idle


async def test_a_failed_send_is_kept_in_front_for_the_next_awaited_event() -> None:
    redis = FakePipelines(fail=ConnectionError("down"))
    sender = EventSender(redis, 0.01)
    q = sender.queue("s", Fence())
    delta(sender, q, "s", "a")
    await eventually(lambda: asyncio.sleep(0, result=sender.idle), what="the failed tick to end")
    assert redis.pipelines == []
    with pytest.raises(ConnectionError):  # Redis still fails: raised to the awaited event's caller
        await sender.send(q, ev("s", "message_end"), None, fenced=True)
    redis.fail = None
    delta(sender, q, "s", "b")  # merged into the kept delta: it was never sent
    await sender.send(q, ev("s", "message_end"), None, fenced=True)
    assert [(e["type"], e["data"]) for e in redis.events(keys.events("s"))] == [
        ("message_update", {"delta": "ab"}), ("message_end", {})]
    await sender.close()


async def test_a_lost_lease_sends_nothing_and_does_not_hold_up_the_others() -> None:
    redis = FakePipelines()
    sender = EventSender(redis, 0.01)
    fence = Fence()
    lost, kept = sender.queue("lost", fence), sender.queue("kept", Fence())
    fence.held = False
    delta(sender, lost, "lost", "x")
    delta(sender, kept, "kept", "y")
    await eventually(lambda: asyncio.sleep(0, result=redis.text(keys.events("kept")) == "y"), what="the held session")
    with pytest.raises(LeaseLost):
        await sender.send(lost, ev("lost", "message_end"), None, fenced=True)
    # Given up on purpose (the dormant status): the ended holder's progress is dropped, the status sent.
    await sender.send(lost, ev("lost", "status"), None, fenced=False)
    assert [e["type"] for e in redis.events(keys.events("lost"))] == ["status"]
    await sender.close()


async def test_an_exclusive_action_goes_before_the_progress_queued_meanwhile() -> None:
    redis = FakePipelines()
    sender = EventSender(redis, 0.0)
    q = sender.queue("s", Fence())
    order: list[str] = []

    async def action() -> None:
        sender.enqueue(q, ev("s", "injection"), None)  # queued while the action holds the session
        await asyncio.sleep(0)
        order.append(f"action, {len(redis.pipelines)} sent")
    await sender.exclusive(q, action)
    await eventually(lambda: asyncio.sleep(0, result=redis.pipelines), what="the queued event after it")
    assert order == ["action, 0 sent"] and [e["type"] for e in redis.events(keys.events("s"))] == ["injection"]


async def test_an_awaited_event_waits_for_a_send_in_flight() -> None:
    """A tick's pipeline is on its way when the engine sends an awaited event: the event follows it."""
    redis = FakePipelines()
    redis.gate.clear()
    sender = EventSender(redis, 0.01)
    q = sender.queue("s", Fence())
    delta(sender, q, "s", "a")
    await eventually(lambda: asyncio.sleep(0, result=q.lock.locked()), what="the tick to take the delta")
    awaited = asyncio.ensure_future(sender.send(q, ev("s", "message_end"), None, fenced=True))
    await asyncio.sleep(0)
    redis.gate.set()
    await awaited
    assert [e["type"] for e in redis.events(keys.events("s"))] == ["message_update", "message_end"]
    await sender.close()


@pytest.mark.parametrize("parts", [["a"], ["x", "y", "z"], ['q"uo\\te\n', "\u2028é😀"]])
def test_streamed_text_is_the_entry_the_event_model_makes(parts: list[str]) -> None:
    """Built without the model (the hot path), the entry is byte for byte SessionEvent's JSON."""
    for run_id in (None, "run_1"):
        text = Text(list(parts), 1_733_300_000_123, run_id)
        model = SessionEvent(type="message_update", session_id="s1", ts=text.ts, data={"delta": "".join(parts)},
                             run_id=run_id)
        assert text_event_json("s1", text) == model.model_dump_json()


def test_text_json_cannot_make_fails_as_the_model_does() -> None:
    with pytest.raises(ValueError, match="surrogates not allowed"):
        text_event_json("s1", Text(["\ud800"], 1, None))


async def test_events_with_commands_of_their_own_go_as_a_pipeline() -> None:
    """An event that adds commands to its round trip (`also`: a model request's usage counters) goes
    with the rest of its batch as a pipeline, in order, not as the batch script."""
    redis = FakePipelines()
    sender = EventSender(redis, 0.0)
    q = sender.queue("s", Fence())
    added: list[object] = []
    sender.enqueue(q, ev("s", "message_start"), None)
    sender.enqueue(q, ev("s", "model_request"), added.append)
    await eventually(lambda: asyncio.sleep(0, result=redis.pipelines), what="the batch")
    assert [e["type"] for e in redis.events(keys.events("s"))] == ["message_start", "model_request"]
    assert redis.scripts == 0 and len(added) == 1
