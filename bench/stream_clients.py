"""The client side of bench-stream, run in child processes (many readers per process).

- `sse_readers`: one asyncio httpx SSE reader per session, through the proxy, from "$"; it reads the
  emit stamps (time.time(), written by the scripted model into every token, GAMMA_SCRIPTED_STAMP) out of
  the `message_update` deltas and records receive time minus emit time for each token, until the
  session's `agent_end`.
- `bare_producer` / `bare_consumer`: the baseline, the same tokens on the same schedule relayed by one
  bare XADD -> XREAD hop per token (consumer: one blocking multi-stream XREAD per shard of 32 streams,
  as the proxy's fan-out reads).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from array import array
from multiprocessing.connection import Connection
from typing import Any

import httpx
import redis.asyncio as aioredis

# <due>[s<sent>]: when the token was due, and when the model server let it go (scripted/pacing.py)
STAMP_RE = re.compile(r"(\d{10}\.\d{6})(?:s(\d{10}\.\d{6}))?")
SHARD = 32


async def _read_one(client: httpx.AsyncClient, sid: str, opened: asyncio.Event, out: dict[str, Any],
                    deadline: float) -> None:
    async with client.stream("GET", f"/sessions/{sid}/events", headers={"Last-Event-ID": "$"}) as resp:
        resp.raise_for_status()
        opened.set()
        xadd = 0.0  # the entry's XADD time (its id's milliseconds), from the frame's `id:` line
        first = 0.0  # the XADD time of the session's first streamed text (bench/stream_steady.py)
        async for line in resp.aiter_lines():
            if line.startswith("id: "):
                xadd = int(line[4:].split("-", 1)[0]) / 1000
                continue
            if not line.startswith("data: "):
                continue
            now = time.time()
            if '"message_update"' in line:
                if '"restart"' in line:
                    out["restarts"] += 1  # a retried model call: its tokens come again
                stamps = STAMP_RE.findall(line)
                if stamps:
                    if not first:  # the session's first token: when it was due, when it came (time to first token)
                        out["first"][sid] = (float(stamps[0][0]), now)
                    first = first or xadd
                    out["events"] += 1
                    out["lat"].extend(now - float(due) for due, _ in stamps)
                    # per hop: model loop late (sent - due), model -> runtime -> XADD, XADD -> proxy -> client;
                    # flat, 4 per token (stream.py regroups)
                    for due, sent in stamps:
                        out["hops"].extend((float(due), float(sent or due), xadd, now))
            elif '"agent_end"' in line:
                out["done"] += 1
                if first:
                    out["spans"].extend((first, xadd))  # this session streamed from `first` to about here
                return
            if time.monotonic() > deadline:
                return


async def _readers(proxy_url: str, token: str, sids: list[str], conn: Connection, timeout_s: float) -> dict[str, Any]:
    # Plain float arrays, not lists of tuples: 40,000 tuples per process made the reader's own cyclic GC
    # run full collections of 35-76 ms while streaming (bench/probe), each one holding every token of
    # half the sessions at once: the clients' pause, counted as latency the harness added.
    out: dict[str, Any] = {"lat": array("d"), "hops": array("d"), "spans": array("d"), "first": {}, "events": 0, "done": 0,
                           "errors": 0, "restarts": 0}
    limits = httpx.Limits(max_connections=len(sids) + 10, max_keepalive_connections=len(sids) + 10)
    async with httpx.AsyncClient(base_url=proxy_url, headers={"Authorization": f"Bearer {token}"}, limits=limits,
                                 timeout=httpx.Timeout(timeout_s, connect=30)) as client:
        events = [asyncio.Event() for _ in sids]
        deadline = time.monotonic() + timeout_s
        tasks = [asyncio.create_task(_read_one(client, sid, ev, out, deadline)) for sid, ev in zip(sids, events, strict=True)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 120)
        conn.send("open")
        cpu0 = time.process_time()
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        out["cpu_s"] = time.process_time() - cpu0  # the readers' CPU while streaming (they share the cores)
        for t in pending:
            t.cancel()
        out["errors"] = sum(1 for t in done if t.exception() is not None) + len(pending)
    return out


def sse_readers(proxy_url: str, token: str, sids: list[str], conn: Connection, timeout_s: float) -> None:
    conn.send(asyncio.run(_readers(proxy_url, token, sids, conn, timeout_s)))


async def _produce(url: str, streams: list[str], tokens: int, ttft_s: float, rate: float, ramp_s: float) -> None:
    r = aioredis.Redis.from_url(url)
    start = time.monotonic() + 0.2
    wall = time.time() - time.monotonic()  # monotonic -> wall clock
    schedule = [(start + random.uniform(0, ramp_s) + ttft_s, 0) for _ in streams]
    sent = [0] * len(streams)
    while any(n < tokens for n in sent):
        now = time.monotonic()
        pipe = r.pipeline(transaction=False)
        for i, stream in enumerate(streams):
            first, _ = schedule[i]
            while sent[i] < tokens and first + sent[i] / rate <= now:
                # one bare XADD per token, stamped when it was due (as the scripted model stamps its tokens)
                pipe.xadd(stream, {"data": f"{wall + first + sent[i] / rate:.6f}"})
                sent[i] += 1
        if len(pipe):
            await pipe.execute()
        await asyncio.sleep(0.002)
    await r.aclose()


def bare_producer(url: str, streams: list[str], tokens: int, ttft_s: float, rate: float, ramp_s: float) -> None:
    asyncio.run(_produce(url, streams, tokens, ttft_s, rate, ramp_s))


async def _consume_shard(url: str, streams: list[str], want: int, out: list[float], deadline: float) -> None:
    r = aioredis.Redis.from_url(url, socket_timeout=30)
    ids = {s: "0-0" for s in streams}
    got = 0
    while got < want and time.monotonic() < deadline:
        try:
            reply = await r.xread(ids, count=200, block=1000)
        except (TimeoutError, ConnectionError, aioredis.RedisError):  # a starved machine: read again
            continue
        now = time.time()
        for stream, entries in reply or []:
            for entry_id, fields in entries:
                ids[stream.decode()] = entry_id.decode()
                out.append(now - float(fields[b"data"]))
                got += 1
    await r.aclose()


def bare_consumer(url: str, streams: list[str], tokens: int, conn: Connection, timeout_s: float) -> None:
    out: list[float] = []

    async def run() -> None:
        deadline = time.monotonic() + timeout_s
        shards = [streams[i : i + SHARD] for i in range(0, len(streams), SHARD)]
        await asyncio.gather(*(_consume_shard(url, s, tokens * len(s), out, deadline) for s in shards))

    try:
        asyncio.run(run())
    finally:
        conn.send(out)
