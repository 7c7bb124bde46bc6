"""The scripted model streams with a real model's timing (both APIs), and the runtime's
Outbox coalesces streamed text so Redis sees far fewer XADDs than tokens, without reordering or
delaying the awaited events."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio as aioredis

from scripted.pacing import Timing, paced
from scripted.settings import ScriptedSettings
from scripted.transport import scripted_client
from scripted.types import ScriptedReply, ScriptedToolCall
from services.runtime.live.events import Outbox
from services.runtime.live.lease import LeaseLost
from services.runtime.live.sender import EventSender
from shared.redis import keys
from tests.support.polling import eventually

TEXT = "@ts@" * 40  # 40 tokens, each stamped with its emit time


def reply(_: dict) -> ScriptedReply:
    return ScriptedReply(content=TEXT, tool_calls=[ScriptedToolCall(name="message_user",
                                                                     arguments={"message": "done", "blockOnUser": True})])


def timed_client():
    knobs = ScriptedSettings(GAMMA_SCRIPTED_TTFT_MS=150, GAMMA_SCRIPTED_TOKENS_PER_S=200,
                             GAMMA_SCRIPTED_JITTER_MS=1, GAMMA_SCRIPTED_STAMP=True)
    return scripted_client(reply, Timing.from_settings(knobs))


def test_the_fast_gpt_profile_and_overrides() -> None:
    assert Timing.from_settings(ScriptedSettings(GAMMA_SCRIPTED_PROFILE="fast_gpt")).ttft_s == 0.4
    assert Timing.from_settings(ScriptedSettings(GAMMA_SCRIPTED_PROFILE="fast_gpt")).tokens_per_s == 80
    assert Timing.from_settings(ScriptedSettings(GAMMA_SCRIPTED_PROFILE="fast_gpt",
                                                 GAMMA_SCRIPTED_TOKENS_PER_S=20)).tokens_per_s == 20
    assert not Timing.from_settings(ScriptedSettings()).active  # off by default: tests stay instant


def check(received: list[tuple[float, str]], started: float, args: list[str]) -> None:
    stamps = [(at, float(text.split("s")[0])) for at, text in received]  # <due>s<sent>
    assert [len(text) for _, text in received] == [len("1733300000.123456s1733300000.123456")] * 40  # one token per chunk
    assert all(float(text.split("s")[1]) >= float(text.split("s")[0]) - 0.002 for _, text in received)  # sent when due
    assert stamps[0][1] - started >= 0.14  # time to first token
    emitted = [s for _, s in stamps]
    assert emitted == sorted(emitted) and 0.15 <= emitted[-1] - emitted[0] <= 3  # 39 intervals at 200/s (slower on a loaded machine)
    assert all(at >= s for at, s in stamps)
    assert len(args) > 5 and all(len(a) <= 4 for a in args)  # tool-call arguments streamed too
    assert json.loads("".join(args)) == {"message": "done", "blockOnUser": True}


@pytest.mark.timeout(30)
async def test_chat_completions_stream_one_token_per_chunk_on_schedule() -> None:
    client = timed_client()
    started = time.time()
    stream = await client.chat.completions.create(model="gpt-5-mini", messages=[{"role": "user", "content": "hi"}], stream=True)
    received, args = [], []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received.append((time.time(), chunk.choices[0].delta.content))
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if call.function and call.function.arguments:
                args.append(call.function.arguments)
    check(received, started, args)


@pytest.mark.timeout(30)
async def test_responses_stream_one_token_per_chunk_on_schedule() -> None:
    client = timed_client()
    async for _ in await client.responses.create(model="gpt-5-mini", input=[{"role": "user", "content": "hi"}], stream=True):
        pass  # warm: the SDK builds its Responses types on first use (a ~0.5 s stall of the loop)
    started = time.time()
    stream = await client.responses.create(model="gpt-5-mini", input=[{"role": "user", "content": "hi"}], stream=True)
    received, args = [], []
    async for event in stream:
        if event.type == "response.output_text.delta":
            received.append((time.time(), event.delta))
        elif event.type == "response.function_call_arguments.delta":
            args.append(event.delta)
    check(received, started, args)


async def bus(*_: object) -> None:
    return None


async def entries(client: aioredis.Redis, sid: str) -> list[dict]:
    return [json.loads(f[b"data"]) for _, f in await client.xrange(keys.events(sid))]


async def text_of(client: aioredis.Redis, sid: str) -> str:
    return "".join(e["data"].get("delta", "") for e in await entries(client, sid))


@pytest.mark.timeout(30)
async def test_deltas_coalesce_per_window_in_order(redis_client: aioredis.Redis) -> None:
    out = Outbox(EventSender(redis_client, 0.03), "co1", bus)
    t0 = time.monotonic()
    for n in range(60):  # 60 tokens at ~500/s
        await out.event("message_update", {"delta": f"{n} "}, wait=False)
        if n == 30:
            await out.event("message_update", {"restart": True}, wait=False)  # not a delta: kept apart
        await asyncio.sleep(0.002)
    await out.event("message_end", {"n": 1})  # awaited: drains the queue first
    windows = (time.monotonic() - t0) / 0.03
    got = await entries(redis_client, "co1")
    deltas = [e["data"]["delta"] for e in got if "delta" in e["data"]]
    assert "".join(deltas) == "".join(f"{n} " for n in range(60))
    assert len(deltas) <= min(windows + 3, 30)  # one per 30 ms window (+ the notice's split), not 60 XADDs
    assert [e["type"] for e in got][-1] == "message_end"
    restart = next(i for i, e in enumerate(got) if e["data"].get("restart"))
    assert "".join(deltas[:restart]).split()[-1] == "30"  # the notice sits where the engine made it


@pytest.mark.timeout(30)
async def test_without_a_window_every_delta_is_its_own_event(redis_client: aioredis.Redis) -> None:
    """GAMMA_DELTA_COALESCE_MS=0: nothing merges and nothing waits for a tick; each delta is an event."""
    sender = EventSender(redis_client, 0.0)
    out = Outbox(sender, "co0", bus)
    for n in range(10):
        await out.event("message_update", {"delta": f"{n} "}, wait=False)
    await eventually(lambda: entries(redis_client, "co0"), what="the deltas sent without an awaited event")
    await out.event("message_end", {})
    got = await entries(redis_client, "co0")
    assert [e["data"].get("delta") for e in got] == [f"{n} " for n in range(10)] + [None]
    assert sender.ticks == 0


@pytest.mark.timeout(30)
async def test_an_awaited_event_is_not_held_by_the_window(redis_client: aioredis.Redis) -> None:
    sender = EventSender(redis_client, 60.0)  # a tick far beyond the test's timeout
    out = Outbox(sender, "co2", bus)
    await out.event("message_update", {"delta": "a"}, wait=False)
    await out.event("message_end", {})  # sends the queued delta first, without waiting for the tick
    assert [e["type"] for e in await entries(redis_client, "co2")] == ["message_update", "message_end"]
    await sender.close()


@pytest.mark.timeout(30)
async def test_one_pipeline_per_tick_for_all_sessions(redis_client: aioredis.Redis) -> None:
    """20 sessions streaming at once: the worker's sender sends them together, one round trip per
    tick (not one per session per window), each stream whole and in order; a session whose lease is
    gone sends nothing and does not hold up the others."""
    sender = EventSender(redis_client, 0.03)

    async def lost() -> None:
        raise LeaseLost("tk-lost")

    outs = [Outbox(sender, f"tk{i}", bus) for i in range(20)]
    gone = Outbox(sender, "tk-lost", bus, fence=lost)

    async def stream(out: Outbox) -> None:
        for n in range(40):
            await out.event("message_update", {"delta": f"{n} "}, wait=False)
            await asyncio.sleep(0.003)

    t0 = time.monotonic()
    await asyncio.gather(*(stream(o) for o in [*outs, gone]))
    whole = "".join(f"{n} " for n in range(40))

    async def all_sent() -> bool:
        return all([await text_of(redis_client, o.sid) == whole for o in outs])
    await eventually(all_sent, what="every session's text")
    windows = (time.monotonic() - t0) / 0.03
    assert sender.ticks <= windows + 2  # all 20 sessions in each round trip
    assert await redis_client.exists(keys.events("tk-lost")) == 0
    with pytest.raises(LeaseLost):  # kept for its next awaited event, which raises
        await gone.event("message_end", {})


@pytest.mark.timeout(30)
async def test_a_late_reader_gets_due_chunks_in_one_read_stamped_when_due() -> None:
    """The scripted provider keeps its schedule while the event loop is busy: what fell due meanwhile
    comes in one read (as from a socket), each token stamped with the time it was due, so the loop's
    lateness shows up as latency the harness added."""
    chunks = [(b"@ts@|", True) for _ in range(20)]
    reads: list[tuple[float, bytes]] = []
    async for data in paced(chunks, Timing(tokens_per_s=200, stamp=True)):
        reads.append((time.time(), data))
        if len(reads) == 1:
            time.sleep(0.05)  # noqa: ASYNC251 - a busy event loop: ~10 tokens fall due meanwhile
    stamps = [float(s.split("s")[0]) for _, data in reads for s in data.decode().split("|") if s]
    assert len(stamps) == 20 and len(reads) < 20 and max(len(d.split(b"|")) - 1 for _, d in reads) >= 5
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert all(0.003 <= g <= 0.2 for g in gaps)  # on the 5 ms schedule, not bunched at the late read
    late = next(at for at, d in reads if len(d.split(b"|")) - 1 >= 5)
    assert late - stamps[1] >= 0.03  # the token due during the stall is seen late: the harness's delay


@pytest.mark.timeout(30)
async def test_the_sender_is_a_read_gate_opening_just_before_each_tick(redis_client: aioredis.Redis) -> None:
    """Model stream readers wait for the gate; it opens `lead_s` before the sender's tick collects the
    queued deltas, so what they read goes out in that tick. A reader cancelled while waiting (an abort)
    does not close the gate for the others, and the tick stops once nobody waits or wants."""
    ticker = EventSender(redis_client, 0.04, lead_s=0.005)
    out = Outbox(ticker, "gate1", bus)
    opened: list[float] = []

    async def reader(n: int) -> None:
        for _ in range(n):
            await ticker.wait()
            opened.append(time.monotonic())
            await out.event("message_update", {"delta": "x"}, wait=False)
    doomed = asyncio.ensure_future(ticker.wait())
    t0 = time.monotonic()
    task = asyncio.ensure_future(reader(5))
    await asyncio.sleep(0.01)
    doomed.cancel()
    await asyncio.wait_for(task, 5)
    gaps = [b - a for a, b in zip(opened, opened[1:], strict=False)]
    assert opened[0] - t0 < 0.1 and all(0.025 <= g <= 0.2 for g in gaps)  # one opening per tick
    async def sent() -> bool:
        return await text_of(redis_client, "gate1") == "x" * 5
    await eventually(sent, what="the text read at the gate")
    assert len(await entries(redis_client, "gate1")) <= 5

    async def idle() -> bool:
        return ticker.idle
    await eventually(idle, what="no tick left running")


def test_the_window_adapts_to_the_number_of_streaming_sessions(redis_client: aioredis.Redis) -> None:
    """Short with few streaming sessions (latency), growing with them so that the worker's events per
    second stay within its budget, never beyond the configured window; no budget: the fixed window."""
    ticker = EventSender(redis_client, 0.03, min_period_s=0.01, sends_per_s=4500)
    for streaming, period in [(0, 0.01), (20, 0.01), (45, 0.01), (90, 0.02), (135, 0.03), (500, 0.03)]:
        ticker.streaming = streaming
        assert ticker.period() == pytest.approx(period)
    fixed = EventSender(redis_client, 0.03)
    fixed.streaming = 1
    assert fixed.period() == 0.03


@pytest.mark.timeout(30)
@pytest.mark.parametrize("readers", [1, 12])
async def test_the_gate_opens_per_the_load_of_streams_waiting_for_it(redis_client: aioredis.Redis, readers: int) -> None:
    """The streams waiting at the gate are the load: one stream gets the short window (10 ms), twelve
    with a budget of 100 events a second the full one (60 ms); each one's text still goes out whole."""
    ticker = EventSender(redis_client, 0.06, min_period_s=0.01, sends_per_s=100)
    outs = [Outbox(ticker, f"adapt{readers}-{i}", bus) for i in range(readers)]
    opened: list[float] = []

    async def reader(out: Outbox, first: bool) -> None:
        for _ in range(12):
            await ticker.wait()
            if first:
                opened.append(time.monotonic())
            await out.event("message_update", {"delta": "x"}, wait=False)
    await asyncio.wait_for(asyncio.gather(*(reader(o, i == 0) for i, o in enumerate(outs))), 10)
    gaps = sorted(b - a for a, b in zip(opened[2:], opened[3:], strict=False))  # after the first ticks counted them
    median = gaps[len(gaps) // 2]
    assert (median < 0.03) if readers == 1 else (median >= 0.05)

    async def all_sent() -> bool:
        return all([await text_of(redis_client, o.sid) == "x" * 12 for o in outs])
    await eventually(all_sent, what="every stream's text")


@pytest.mark.timeout(30)
async def test_the_window_is_kept_while_the_streams_end(redis_client: aioredis.Redis) -> None:
    """The load falls slowly: after many streams, the one left keeps the long window for a while
    (the sessions that end one after the other do not shrink the window of the rest at once)."""
    ticker = EventSender(redis_client, 0.06, min_period_s=0.01, sends_per_s=100)
    ticker.streaming = 30  # was 30 streams: 0.3 s a tick at this budget, capped to 60 ms
    opened: list[float] = []
    for _ in range(6):
        await ticker.wait()
        opened.append(time.monotonic())
    assert min(b - a for a, b in zip(opened, opened[1:], strict=False)) >= 0.05
    assert ticker.streaming >= 25
