"""The SSE `reset` event (docs/integration.md "Dormant sessions in Redis"): sent when entries after the client's Last-Event-ID are gone, never otherwise."""

from __future__ import annotations

import redis.asyncio as aioredis

from services.proxy.fanout import EventFanout
from services.proxy.routes.events import event_frames, history_gap
from shared.redis import keys

SID = "s_reset"


async def first_frames(client: aioredis.Redis, start: str, n: int) -> list[str]:
    fanout = EventFanout(client, client, block_ms=200, queue_size=100, heartbeat_s=5.0)
    # The heartbeat only ends a read that would otherwise hang: on a loaded machine a short one can come
    # before the fan-out's first read has answered.
    frames = event_frames(fanout, client, SID, "alice", start)
    out: list[str] = []
    try:
        async for frame in frames:
            text = frame.decode()
            if text.startswith(": heartbeat"):
                break
            if not text.startswith(("retry:", ":")):
                out.append(text)
            if len(out) >= n:
                break
    finally:
        await frames.aclose()
        await fanout.close()
    return out


async def test_capped_stream_resets_only_clients_behind_its_first_entry(redis_client: aioredis.Redis) -> None:
    # Explicit ids in one millisecond: the entry right before the first kept one is then known exactly
    # (across a millisecond boundary the proxy cannot tell it from a trimmed one, and resets: harmless).
    ids = [(await redis_client.xadd(keys.events(SID), {"data": f'{{"n":{i}}}'}, id=f"1000-{i + 1}")).decode()
           for i in range(6)]
    await redis_client.xtrim(keys.events(SID), minid=ids[3], approximate=False)  # what MAXLEN does to an old stream
    [reset, nxt] = await first_frames(redis_client, ids[1], 2)
    assert reset.startswith("event: reset\n") and '"transcript": "/sessions/s_reset/transcript"' in reset
    assert nxt.startswith(f"id: {ids[3]}\n")  # then what the stream still holds, from its first entry
    # The reset's id resumes without another reset; so does the entry right before the first kept one.
    reset_id = reset.split("\n")[1][len("id: "):]
    assert await history_gap(redis_client, SID, reset_id, reset_id) is None
    assert await history_gap(redis_client, SID, ids[2], ids[2]) is None
    assert (await first_frames(redis_client, ids[3], 1))[0].startswith(f"id: {ids[4]}\n")
    # "0" replays what is retained, unless a sweep deleted the stream once.
    assert (await first_frames(redis_client, "0", 1))[0].startswith(f"id: {ids[3]}\n")
    assert await history_gap(redis_client, SID, "$", ids[5]) is None


async def test_swept_stream_resets_clients_before_the_sweep_only(redis_client: aioredis.Redis) -> None:
    await redis_client.hset(keys.session_row(SID), mapping={"id": SID, keys.EVENTS_SWEPT_FIELD: "1000-5"})
    new = (await redis_client.xadd(keys.events(SID), {"data": '{"n":1}'})).decode()
    assert await history_gap(redis_client, SID, "1000-4", "1000-4") == "1000-5"
    assert await history_gap(redis_client, SID, "0", "0") == "1000-5"
    assert await history_gap(redis_client, SID, "1000-5", "1000-5") is None
    [reset, nxt] = await first_frames(redis_client, "0", 2)
    assert reset.startswith("event: reset\nid: 1000-5\n") and nxt.startswith(f"id: {new}\n")


async def test_a_position_beyond_the_stream_resets_to_its_newest_entry(redis_client: aioredis.Redis) -> None:
    """A Last-Event-ID the stream never sent (a future id) would wait for ids above it and miss every
    event: the client reloads instead, and resumes from the newest entry."""
    sid = "s_future"
    ids = [(await redis_client.xadd(keys.events(sid), {"data": f'{{"n":{i}}}'}, id=f"2000-{i + 1}")).decode()
           for i in range(3)]
    assert await history_gap(redis_client, sid, "99999999999999-0", "99999999999999-0") == ids[-1]
    assert await history_gap(redis_client, sid, ids[-1], ids[-1]) is None  # the newest entry itself: no reset
    fanout = EventFanout(redis_client, redis_client, block_ms=200, queue_size=100, heartbeat_s=5.0)
    frames = event_frames(fanout, redis_client, sid, "alice", "99999999999999-0")
    got: list[str] = []
    try:
        async for frame in frames:
            body = frame.decode()
            if body.startswith("event: reset"):
                got.append(body)
                await redis_client.xadd(keys.events(sid), {"data": '{"n":9}'}, id="2001-0")
            elif body.startswith("id: "):
                got.append(body)
                break
    finally:
        await frames.aclose()
        await fanout.close()
    assert got[0].startswith(f"event: reset\nid: {ids[-1]}\n") and '"reason": "unknown_position"' in got[0]
    assert got[1].startswith("id: 2001-0\n")  # the next event arrives: nothing is silently missed
    # A stream that never held an entry: any position is unknown, the client resumes from the start.
    assert await history_gap(redis_client, "s_empty", "5-0", "5-0") == "0"
