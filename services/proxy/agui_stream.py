"""An AG-UI run's event stream (docs/integration.md "AG-UI"): the session's events from the run's start
cursor, translated (`agui_translate`), as SSE frames `data: <json>\\n\\n` with LF only (the official
client splits frames on `\\n\\n` and fails on CRLF). Each frame made from a stream entry carries that
entry's id (`id:`), the cursor a reconnect resumes after: entries up to it are translated again (the
translator is deterministic) but not sent. Entries come as `GET /events` gets them: the fan-out is
joined first, then the stream is replayed, then the fan-out followed, skipping ids already sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis
from ag_ui.core import BaseEvent, RunStartedEvent, StateDeltaEvent, StateSnapshotEvent
from ag_ui.core.version import PROTOCOL_VERSION

from shared import keys
from shared.redis_wire import parse_id

from .agui_state import RunState
from .agui_translate import Translation, Translator
from .fanout import HEARTBEAT, EventFanout
from .routes.events import replay


@dataclass(frozen=True)
class RunStream:
    sid: str
    user: str
    start: str  # the newest entry id before the run's prompt ("0": none)
    after: str | None  # the client's cursor: entries up to it were delivered


def frame(event: BaseEvent, entry_id: str | None = None) -> bytes:
    data = event.model_dump_json(by_alias=True, exclude_none=True)
    return (f"id: {entry_id}\n" if entry_id else "").encode() + b"data: " + data.encode() + b"\n\n"


async def _state_events(state: RunState, out: Translation) -> list[BaseEvent]:
    ops: list[dict[str, object]] = []
    for kind, value in out.state:
        if kind == "tasks":
            ops += state.tasks(value)
        elif kind == "skill":
            ops += state.skill(*value)
        elif kind == "ui":
            try:
                update = base64.b64decode(value, validate=True)
            except ValueError:
                continue
            ops += await state.ui(update)
    return [StateDeltaEvent(delta=ops)] if ops else []


async def _entries(fanout: EventFanout, redis: aioredis.Redis, run: RunStream) -> AsyncIterator[tuple[str, str] | None]:
    """(entry id, event JSON) from after `run.start`, in order, without a gap or a repeat; None for a
    heartbeat interval with nothing new."""
    sub = await fanout.subscribe(run.sid, run.user)
    try:
        last = run.start
        async for entry_id, data, _ in replay(redis, keys.events(run.sid), last):
            last = entry_id
            yield entry_id, data
        sent = parse_id(last) if last != "0" else (0, 0)
        while True:
            item = await sub.queue.get()
            if item is None:
                return
            if item is HEARTBEAT:
                yield None
                continue
            entry_id, data, _ = item
            if (at := parse_id(entry_id)) > sent:
                sent = at
                yield entry_id, data
    finally:
        fanout.unsubscribe(sub)


async def run_frames(fanout: EventFanout, redis: aioredis.Redis, run: RunStream, translator: Translator,
                     state: RunState, finished: bool) -> AsyncIterator[bytes]:
    """RUN_STARTED and the state now, then the run's events up to its end. `finished`: the run has
    nothing to wait for (a cancelled question): it ends at once."""
    yield frame(RunStartedEvent(thread_id=translator.thread_id, run_id=translator.run_id,
                                protocol_version=PROTOCOL_VERSION))
    yield frame(StateSnapshotEvent(snapshot=state.snapshot()))
    if finished:
        done = Translation()
        translator.finish(done)
        for event in done.events:
            yield frame(event)
        return
    cursor = parse_id(run.after) if run.after else None
    resumed = cursor is None
    async for entry in _entries(fanout, redis, run):
        if entry is None:
            yield b": heartbeat\n\n"  # also how a client that went away is noticed
            continue
        entry_id, data = entry
        try:
            event = json.loads(data)
        except ValueError:
            continue
        past = cursor is None or parse_id(entry_id) > cursor
        events = translator.reopen() if past and not resumed else []  # what was open before the cursor
        resumed = resumed or past
        out = translator.feed(event)
        if not past:
            continue  # delivered before the reconnect; the state snapshot above already holds its changes
        events += await _state_events(state, out)
        events += out.events
        if events:
            yield b"".join(frame(e, entry_id) for e in events)
        if out.done:
            return
