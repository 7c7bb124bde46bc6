"""Issue 20: the scripted model streams with a real model's timing (both APIs), and the runtime's
Outbox coalesces streamed text so Redis sees far fewer XADDs than tokens, without reordering or
delaying the awaited events."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from services.runtime.events import Outbox
from services.runtime.lease import LeaseLost
from services.runtime.ticker import DeltaTicker
from shared import keys
from shared.model import ScriptedReply, ScriptedToolCall, openai_client
from shared.pacing import Timing, paced
from shared.settings import Settings
from tests.support.polling import eventually


def nothing_queued(*outs: Outbox) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return not any(o.has_queued() for o in outs)
    return probe


TEXT = "@ts@" * 40  # 40 tokens, each stamped with its emit time


def reply(_: dict) -> ScriptedReply:
    return ScriptedReply(content=TEXT, tool_calls=[ScriptedToolCall(name="message_user",
                                                                     arguments={"message": "done", "blockOnUser": True})])


def timed_client():  # type: ignore[no-untyped-def]
    settings = Settings(OPENAI_API_KEY=None, GAMMA_SCRIPTED_TTFT_MS=150, GAMMA_SCRIPTED_TOKENS_PER_S=200,
                        GAMMA_SCRIPTED_JITTER_MS=1, GAMMA_SCRIPTED_STAMP=True)
    return openai_client(settings, reply)


def test_the_fast_gpt_profile_and_overrides() -> None:
    assert Timing.from_settings(Settings(GAMMA_SCRIPTED_PROFILE="fast_gpt")).ttft_s == 0.4
    assert Timing.from_settings(Settings(GAMMA_SCRIPTED_PROFILE="fast_gpt")).tokens_per_s == 80
    assert Timing.from_settings(Settings(GAMMA_SCRIPTED_PROFILE="fast_gpt", GAMMA_SCRIPTED_TOKENS_PER_S=20)).tokens_per_s == 20
    assert not Timing.from_settings(Settings()).active  # off by default: tests stay instant


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
    stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
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
    async for _ in await client.responses.create(model="m", input=[{"role": "user", "content": "hi"}], stream=True):
        pass  # warm: the SDK builds its Responses types on first use (a ~0.5 s stall of the loop)
    started = time.time()
    stream = await client.responses.create(model="m", input=[{"role": "user", "content": "hi"}], stream=True)
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


def ticker_for(client: aioredis.Redis, with_ticker: bool, period_s: float) -> DeltaTicker | None:
    return DeltaTicker(client, period_s) if with_ticker else None


@pytest.mark.parametrize("with_ticker", [False, True], ids=["own-window", "worker-ticker"])
@pytest.mark.timeout(30)
async def test_deltas_coalesce_per_window_in_order(redis_client: aioredis.Redis, with_ticker: bool) -> None:
    out = Outbox(redis_client, "co1", bus, coalesce_s=0.03, ticker=ticker_for(redis_client, with_ticker, 0.03))
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


@pytest.mark.parametrize("with_ticker", [False, True], ids=["own-window", "worker-ticker"])
@pytest.mark.timeout(30)
async def test_an_awaited_event_is_not_held_by_the_window(redis_client: aioredis.Redis, with_ticker: bool) -> None:
    """A window of an hour: an awaited event that waited for it would never return within the test."""
    out = Outbox(redis_client, "co2", bus, coalesce_s=3600, ticker=ticker_for(redis_client, with_ticker, 3600))
    await out.event("message_update", {"delta": "a"}, wait=False)
    await asyncio.wait_for(out.event("message_end", {}), 10)  # sends the queued delta first, at once
    assert [e["type"] for e in await entries(redis_client, "co2")] == ["message_update", "message_end"]


@pytest.mark.timeout(30)
async def test_one_pipeline_per_tick_for_all_sessions(redis_client: aioredis.Redis) -> None:
    """20 sessions streaming at once: the worker's ticker sends them together, one round trip per
    tick (not one per session per window), each stream whole and in order; a session whose lease is
    gone sends nothing and does not hold up the others."""
    ticker = DeltaTicker(redis_client, 0.03)

    async def lost() -> None:
        raise LeaseLost("tk-lost")

    outs = [Outbox(redis_client, f"tk{i}", bus, coalesce_s=0.03, ticker=ticker) for i in range(20)]
    gone = Outbox(redis_client, "tk-lost", bus, fence=lost, coalesce_s=0.03, ticker=ticker)

    async def stream(out: Outbox) -> None:
        for n in range(40):
            await out.event("message_update", {"delta": f"{n} "}, wait=False)
            await asyncio.sleep(0.003)

    t0 = time.monotonic()
    await asyncio.gather(*(stream(o) for o in [*outs, gone]))
    await eventually(nothing_queued(*outs), timeout=10, interval=0.01, what="the ticker's sends")
    windows = (time.monotonic() - t0) / 0.03
    for o in outs:
        got = await entries(redis_client, o.sid)
        assert "".join(e["data"]["delta"] for e in got) == "".join(f"{n} " for n in range(40))
    assert ticker.ticks <= windows + 2  # all 20 sessions in each round trip
    assert await redis_client.exists(keys.events("tk-lost")) == 0
    assert gone.has_queued()  # kept for its next awaited event, which raises LeaseLost


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
async def test_the_ticker_is_a_read_gate_opening_just_before_each_tick(redis_client: aioredis.Redis) -> None:
    """Model stream readers wait for the gate; it opens `lead_s` before the ticker collects the queued
    deltas, so what they read goes out in that tick. A reader cancelled while waiting (an abort)
    does not close the gate for the others, and the ticker stops once nobody waits or wants."""
    ticker = DeltaTicker(redis_client, 0.04, lead_s=0.005)
    out = Outbox(redis_client, "gate1", bus, coalesce_s=0.04, ticker=ticker)
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
    await eventually(nothing_queued(out), timeout=5, interval=0.01, what="the ticker's sends")
    events = [json.loads(f[b"data"]) for _, f in await redis_client.xrange(keys.events("gate1"))]
    assert "".join(e["data"]["delta"] for e in events) == "x" * 5 and len(events) <= 5
    async def idle() -> bool:
        return ticker._task is not None and ticker._task.done()
    await eventually(idle, timeout=5, interval=0.01, what="the idle ticker's task to end")  # no task left behind


def test_the_window_adapts_to_the_number_of_streaming_sessions(redis_client: aioredis.Redis) -> None:
    """Short with few streaming sessions (latency), growing with them so that the worker's events per
    second stay within its budget, never beyond the configured window; no budget: the fixed window."""
    ticker = DeltaTicker(redis_client, 0.03, min_period_s=0.01, sends_per_s=4500)
    for streaming, period in [(0, 0.01), (20, 0.01), (45, 0.01), (90, 0.02), (135, 0.03), (500, 0.03)]:
        ticker.streaming = streaming
        assert ticker.period() == pytest.approx(period)
    fixed = DeltaTicker(redis_client, 0.03)
    fixed.streaming = 1
    assert fixed.period() == 0.03


@pytest.mark.timeout(30)
@pytest.mark.parametrize("readers", [1, 12])
async def test_the_gate_opens_per_the_load_of_streams_waiting_for_it(redis_client: aioredis.Redis, readers: int) -> None:
    """The streams waiting at the gate are the load: one stream gets the short window (10 ms), twelve
    with a budget of 100 events a second the full one (60 ms); each one's text still goes out whole."""
    ticker = DeltaTicker(redis_client, 0.06, min_period_s=0.01, sends_per_s=100)
    outs = [Outbox(redis_client, f"adapt{readers}-{i}", bus, coalesce_s=0.06, ticker=ticker) for i in range(readers)]
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
    await eventually(nothing_queued(*outs), timeout=5, interval=0.01, what="the ticker's sends")
    for o in outs:
        assert "".join(e["data"]["delta"] for e in await entries(redis_client, o.sid)) == "x" * 12


@pytest.mark.timeout(30)
async def test_the_window_is_kept_while_the_streams_end(redis_client: aioredis.Redis) -> None:
    """The load falls slowly: after many streams, the one left keeps the long window for a while
    (the sessions that end one after the other do not shrink the window of the rest at once)."""
    ticker = DeltaTicker(redis_client, 0.06, min_period_s=0.01, sends_per_s=100)
    ticker.streaming = 30  # was 30 streams: 0.3 s a tick at this budget, capped to 60 ms
    opened: list[float] = []
    for _ in range(6):
        await ticker.wait()
        opened.append(time.monotonic())
    assert min(b - a for a, b in zip(opened, opened[1:], strict=False)) >= 0.05
    assert ticker.streaming >= 25
