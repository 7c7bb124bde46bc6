"""`make bench-bus`: the bus helper against raw redis-py, same Redis, same run.

bus: `shared.streams.bus.publish` -> `shared.streams.bus.subscribe` handler -> FastStream's XACK (the brokers are built
     with `shared.streams.bus.make_broker`, with a Prometheus registry, like the services build them).
raw: XADD {data: JSON} -> XREADGROUP COUNT 100 BLOCK 100 -> the same validation -> XACK per entry.

One producer awaits each publish in turn while the consumer runs in the same event loop. Latency is
publish start -> handler done; throughput is N / (first publish -> last handler done), checked against
an empty PEL afterwards. Writes bench/results/bus.json and prints a table.
Target: bus throughput >= 50% of raw, bus p99 <= 2x raw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.stack import redis_answers, start_embedded_redis  # noqa: E402
from shared.redis.reconnect import connect, connect_blocking  # noqa: E402
from shared.streams.bus import ensure_group, make_broker, publish, subscribe  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "bus.json"
DATA_DIR = Path(os.environ.get("GAMMA_DATA_DIR", "./data")).resolve()
GROUP = "bench"


class Ping(BaseModel):
    i: int
    t: float


@dataclass
class Result:
    messages: int
    seconds: float
    throughput_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float


def summarize(n: int, started: float, finished: float, latencies: list[float]) -> Result:
    ordered = sorted(latencies)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    seconds = finished - started
    return Result(messages=n, seconds=round(seconds, 3), throughput_per_s=round(n / seconds, 1),
                  p50_ms=round(q[49] * 1000, 3), p99_ms=round(q[98] * 1000, 3), max_ms=round(ordered[-1] * 1000, 3))


async def bench_bus(url: str, n: int) -> Result:
    stream = f"gamma:bench:bus:{uuid.uuid4().hex[:8]}"
    client = connect(url)
    consumer = make_broker(url, CollectorRegistry(), "bench")
    producer = make_broker(url, CollectorRegistry(), "bench-producer")
    latencies: list[float] = []
    done = asyncio.Event()
    finished = 0.0

    async def handle(ping: Ping) -> None:
        nonlocal finished
        finished = time.perf_counter()
        latencies.append(finished - ping.t)
        if len(latencies) == n:
            done.set()

    subscribe(consumer, client, stream=stream, group=GROUP, consumer="bench-1", model=Ping, handler=handle)
    await ensure_group(client, stream, GROUP)
    await consumer.start()
    await producer.connect()
    try:
        started = time.perf_counter()
        for i in range(n):
            await publish(producer, stream, Ping(i=i, t=time.perf_counter()))
        await asyncio.wait_for(done.wait(), 300)
        await _drained(client, stream)
    finally:
        await producer.stop()
        await consumer.stop()
        await client.delete(stream)
        await client.aclose()
    return summarize(n, started, finished, latencies)


async def bench_raw(url: str, n: int) -> Result:
    stream = f"gamma:bench:raw:{uuid.uuid4().hex[:8]}"
    producer = connect(url)  # a cluster client when url names a cluster node
    reader = connect_blocking(url, 0.1)
    latencies: list[float] = []
    finished = 0.0
    await ensure_group(producer, stream, GROUP)

    async def consume() -> None:
        nonlocal finished
        while len(latencies) < n:
            reply = await reader.xreadgroup(GROUP, "raw-1", {stream: ">"}, count=100, block=100)
            for _, entries in reply or []:
                for entry_id, fields in entries:
                    ping = Ping.model_validate_json(fields[b"data"])
                    await reader.xack(stream, GROUP, entry_id)
                    finished = time.perf_counter()
                    latencies.append(finished - ping.t)

    task = asyncio.create_task(consume())
    try:
        started = time.perf_counter()
        for i in range(n):
            await producer.xadd(stream, {"data": Ping(i=i, t=time.perf_counter()).model_dump_json()})
        await asyncio.wait_for(task, timeout=300)
        await _drained(producer, stream)
    finally:
        task.cancel()
        await producer.delete(stream)
        await producer.aclose()
        await reader.aclose()
    return summarize(n, started, finished, latencies)


async def _drained(client: aioredis.Redis, stream: str) -> None:
    for _ in range(100):
        if int((await client.xpending(stream, GROUP))["pending"]) == 0:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{stream}: entries left pending after the run")


def table(rows: dict[str, Result], ratios: dict[str, float]) -> str:
    out = [f"{'path':<6} {'msgs':>6} {'seconds':>8} {'msg/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"]
    for name, r in rows.items():
        out.append(f"{name:<6} {r.messages:>6} {r.seconds:>8.2f} {r.throughput_per_s:>9.0f} {r.p50_ms:>8.2f} "
                   f"{r.p99_ms:>8.2f} {r.max_ms:>8.2f}")
    out.append(f"bus/raw: throughput {ratios['throughput']:.2f} (target >= 0.50), "
               f"p50 {ratios['p50']:.2f}, p99 {ratios['p99']:.2f} (target <= 2.00)")
    return "\n".join(out)


async def main(n: int, rounds: int) -> dict[str, Any]:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    embedded = None
    if not redis_answers(url):
        embedded, url = start_embedded_redis(DATA_DIR)
    try:
        await bench_raw(url, min(n, 1000))  # warm-up: imports, connections, JIT-free but cache-warm
        await bench_bus(url, min(n, 1000))
        best: dict[str, Result] = {}
        for _ in range(rounds):  # alternate so both paths see the same machine noise
            for name, fn in (("raw", bench_raw), ("bus", bench_bus)):
                result = await fn(url, n)
                if name not in best or result.throughput_per_s > best[name].throughput_per_s:
                    best[name] = result
    finally:
        if embedded is not None:
            embedded.terminate()
            embedded.wait(timeout=10)
    bus, raw = best["bus"], best["raw"]
    ratios = {
        "throughput": round(bus.throughput_per_s / raw.throughput_per_s, 3),
        "p50": round(bus.p50_ms / raw.p50_ms, 3),
        "p99": round(bus.p99_ms / raw.p99_ms, 3),
    }
    report = {
        "bus": asdict(bus),
        "raw": asdict(raw),
        "ratios": ratios,
        "target": {"throughput_ratio_min": 0.5, "p99_ratio_max": 2.0},
        "meets_target": ratios["throughput"] >= 0.5 and ratios["p99"] <= 2.0,
        "rounds": rounds,
        "method": "sequential producer, consumer in the same event loop; best round by throughput per path",
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(table({"raw": raw, "bus": bus}, ratios))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return report


CLUSTER_RESULTS = Path(__file__).parent / "results" / "bus.cluster.json"


async def side_by_side(single_url: str, cluster_url: str, n: int, rounds: int) -> dict[str, Any]:
    """The same two paths on a single Redis and on a Redis Cluster, alternating, in one run; on the
    cluster with and without the WAIT that follows each publish (GAMMA_REDIS_WAIT_MS)."""
    targets = {"single": (single_url, "250"), "cluster": (cluster_url, "250"), "cluster-nowait": (cluster_url, "0")}
    best: dict[str, Result] = {}
    for _ in range(rounds + 1):  # the first round warms up every target
        for target, (url, wait) in targets.items():
            os.environ["GAMMA_REDIS_WAIT_MS"] = wait
            for name, fn in (("raw", bench_raw), ("bus", bench_bus)):
                result = await fn(url, n if _ else min(n, 1000))
                key = f"{target}/{name}"
                if _ and (key not in best or result.throughput_per_s > best[key].throughput_per_s):
                    best[key] = result
    os.environ.pop("GAMMA_REDIS_WAIT_MS", None)
    ratio = {f"{k}/single": round(best[f"{k}/bus"].throughput_per_s / best["single/bus"].throughput_per_s, 3)
             for k in ("cluster", "cluster-nowait")}
    ratio["bus/raw on cluster"] = round(best["cluster/bus"].throughput_per_s / best["cluster/raw"].throughput_per_s, 3)
    ratio["wait cost p50 ms"] = round(best["cluster/bus"].p50_ms - best["cluster-nowait/bus"].p50_ms, 3)
    report = {"results": {k: asdict(v) for k, v in best.items()}, "throughput_ratios": ratio, "rounds": rounds,
              "note": "one 2-core machine shared with other work; a local cluster's six nodes share it too",
              "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"{'target/path':<20} {'msg/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for key, r in best.items():
        print(f"{key:<20} {r.throughput_per_s:>9.0f} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f}")
    print(json.dumps(ratio))
    CLUSTER_RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {CLUSTER_RESULTS}")
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cluster-url", default=os.environ.get("GAMMA_BENCH_CLUSTER_URL"),
                        help="a Redis Cluster node: run single (REDIS_URL) and cluster side by side")
    args = parser.parse_args()
    if args.cluster_url:
        asyncio.run(side_by_side(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), args.cluster_url,
                                 args.n, args.rounds))
    else:
        asyncio.run(main(args.n, args.rounds))
