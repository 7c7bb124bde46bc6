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

from services.proxy.agui.agui_state import RunState
from services.proxy.agui.agui_translate import Translation, Translator, still_open
from services.proxy.fanout import HEARTBEAT, EventFanout
from services.proxy.routes.events import history_gap, replay
from services.proxy.rows import load_state
from shared.redis import keys
from shared.redis.redis_wire import parse_id

CURSOR_KEY = "gammaCursor"


@dataclass(frozen=True)
class RunStream:
    sid: str
    user: str
    start: str  # the newest entry id before the run's prompt ("0": none)
    after: str | None  # the client's cursor: entries up to it were delivered


def frame(event: BaseEvent, entry_id: str | None = None) -> bytes:
    """One SSE frame. An event made from a stream entry carries the entry's id twice: as the frame's
    `id:` (for SSE readers) and as `metadata.gammaCursor`, `<entry id>.<k>` for the k-th event made
    from that entry (0: its state deltas) (HttpAgent drops `id:`; its subscribers see
    metadata as each event is applied, so `GammaAgent` knows what it has)."""
    if entry_id:
        event = event.model_copy(update={"metadata": {**(event.metadata or {}), CURSOR_KEY: entry_id}})
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
    cursor = parse_cursor(run.after) if run.after else None
    resumed = cursor is None
    async for entry in _entries(fanout, redis, run):
        if entry is None:
            if await _over(redis, run):  # its end is gone from the stream (swept, capped): end it here
                done = Translation()
                translator.finish(done)
                yield b"".join(frame(e) for e in done.events)
                return
            yield b": heartbeat\n\n"  # also how a client that went away is noticed
            continue
        entry_id, data = entry
        try:
            event = json.loads(data)
        except ValueError:
            continue
        at = parse_id(entry_id)
        if cursor is not None and at < cursor[0]:
            translator.feed(event)  # delivered before the reconnect; the snapshot above holds its state
            continue
        before = [] if resumed else translator.reopen()  # what was open before the cursor
        out = translator.feed(event)
        numbered = list(enumerate(out.events, start=1))
        if not resumed and cursor is not None and at == cursor[0]:  # partly delivered: the rest of it
            before = still_open(before, out.events[:cursor[1]])
            numbered = numbered[cursor[1]:]
        resumed = True
        batch = [frame(e, f"{entry_id}.0") for e in await _state_events(state, out)]
        batch += [frame(e) for e in before] + [frame(e, f"{entry_id}.{k}") for k, e in numbered]
        if batch:
            yield b"".join(batch)
        if out.done:
            return


async def _over(redis: aioredis.Redis, run: RunStream) -> bool:
    """Nothing new for a heartbeat interval, entries after the run's start are gone from the stream (the
    dormant sweep, or MAXLEN: `routes/events.history_gap`) and the session is dormant (or deleted): the
    run ended and its end can no longer be read. A lapsed lease alone (a slow renewal, a failover) is not
    an end: the stream still holds what the run wrote."""
    if await history_gap(redis, run.sid, run.start, run.start) is None:
        return False
    state = await load_state(redis, run.sid)
    return state is None or state.status() == "dormant"


def parse_cursor(value: str) -> tuple[tuple[int, int], int]:
    """`<stream entry id>.<k>`: the entry, and how many of the AG-UI events made from it were delivered
    (0: its state changes only). A bare entry id means all of them."""
    entry, _, k = value.partition(".")
    return parse_id(entry), int(k) if k else 1 << 30
