"""`make bench-cluster-inbox`: the runtime's inbox reads on a Redis Cluster, per session vs per node.

One `InboxReader` (as a runtime worker holds it) with S live sessions, twice on the same local cluster:
- before (`rings=False`): one blocking XREADGROUP, on its own connection, per slot; in practice one
  per session (16,384 slots);
- after (the cluster default): every append also SPUBLISHes a ring; one sharded Pub/Sub connection
  per node, rung inboxes read without blocking, batched per node; a sweep of every session each second.
Per mode: connections to the cluster and Redis CPU (INFO cpu, commandstats of the primaries) while
idle (T seconds, nothing appended) and under load (appends at R/s to random sessions), the reader
process's CPU while idle, and append -> entry read latency p50/p99 under load.

Needs a cluster (--cluster-url, or GAMMA_BENCH_CLUSTER_URL); the machine is shared: the load average
is in the JSON and the table. Writes bench/results/cluster_inbox.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
import redis.cluster  # noqa: E402

from shared.contracts.streams.inbox import UserPrompt  # noqa: E402
from shared.redis import keys  # noqa: E402
from shared.redis.reconnect import connect, connect_blocking  # noqa: E402
from shared.streams import inbox  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "cluster_inbox.json"
COMMANDS = ("xreadgroup", "xadd", "eval", "spublish", "ssubscribe", "xack")


def quantiles(samples: list[float]) -> dict[str, float]:
    if len(samples) < 2:
        return {"n": len(samples), "p50_ms": float("nan"), "p99_ms": float("nan")}
    q = statistics.quantiles(sorted(samples), n=100, method="inclusive")
    return {"n": len(samples), "p50_ms": round(q[49] * 1000, 3), "p99_ms": round(q[98] * 1000, 3)}


class Primaries:
    """INFO of the cluster's primaries, summed: CPU seconds, clients, calls per command."""

    def __init__(self, url: str) -> None:
        with redis.cluster.RedisCluster.from_url(url.rsplit("/", 1)[0]) as c:
            self.nodes = [(n.host, n.port) for n in c.get_primaries()]

    def snapshot(self) -> dict[str, float]:
        out: dict[str, float] = {"cpu_s": 0.0, "clients": 0.0}
        for host, port in self.nodes:
            with redis.Redis(host=host, port=port) as c:
                cpu, clients, stats = c.info("cpu"), c.info("clients"), c.info("commandstats")
            out["cpu_s"] += float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
            out["clients"] += int(clients["connected_clients"])
            for name in COMMANDS:
                out[name] = out.get(name, 0) + int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        return out

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
        out = {"redis_cpu_ms_per_s": round((after["cpu_s"] - before["cpu_s"]) * 1000 / seconds, 2)}
        for name in COMMANDS:
            out[f"{name}_per_s"] = round((after[name] - before[name]) / seconds, 1)
        return out


async def run_mode(url: str, rings: bool, sessions: int, idle_s: float, load_s: float, rate: int) -> dict[str, Any]:
    os.environ["GAMMA_REDIS_WAIT_MS"] = "0"  # the WAIT is bench-cluster's subject; here only the reads
    primaries = Primaries(url)
    client, blocking = connect(url), connect_blocking(url, 1.0)
    reader = inbox.InboxReader(blocking, "bench-reader", rings=rings)
    sids = [f"bench-{uuid.uuid4().hex[:10]}" for _ in range(sessions)]
    sent: dict[str, float] = {}
    samples: list[float] = []
    expected, all_read = {"n": -1}, asyncio.Event()
    base = primaries.snapshot()
    for sid in sids:
        await reader.add(sid)

    async def consume() -> None:
        while True:
            entries = await reader.read(block_ms=500)
            now = time.perf_counter()
            for entry in entries:
                samples.append(now - sent[getattr(entry.message, "prompt_id", "")])
            if len(samples) == expected["n"]:
                all_read.set()
            if entries:
                pipe = blocking.pipeline(transaction=False)
                for entry in entries:
                    pipe.xack(keys.inbox(entry.session_id), inbox.GROUP, entry.entry_id)
                await pipe.execute()

    task = asyncio.create_task(consume())
    try:
        await asyncio.sleep(2.0)  # every read in flight, every subscription confirmed
        idle0, cpu0, t0 = primaries.snapshot(), time.process_time(), time.perf_counter()
        await asyncio.sleep(idle_s)
        idle1, cpu1, t1 = primaries.snapshot(), time.process_time(), time.perf_counter()
        interval = 1 / rate
        next_at = time.perf_counter()
        i = 0
        while time.perf_counter() - t1 < load_s:
            sent[f"p{i}"] = time.perf_counter()
            await inbox.append(client, UserPrompt(session_id=random.choice(sids), prompt_id=f"p{i}",
                                                  message=f"bench {i}"), ring=rings)
            i += 1
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        expected["n"] = i
        if len(samples) < i:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_read.wait(), 10)
        load1, t2 = primaries.snapshot(), time.perf_counter()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        ring_connections = reader.rings.connections if reader.rings is not None else 0
        await reader.close()
        pipe = client.pipeline(transaction=False)
        for sid in sids:
            pipe.delete(keys.inbox(sid))
        await pipe.execute()
        await client.aclose()
        await blocking.aclose()
    return {
        "mode": "rings (per node)" if rings else "blocked read per slot",
        "sessions": sessions,
        "connections_added": int(idle0["clients"] - base["clients"]),
        "pubsub_connections": ring_connections,
        "idle": {**Primaries.delta(idle0, idle1, t1 - t0),
                 "reader_cpu_ms_per_s": round((cpu1 - cpu0) * 1000 / (t1 - t0), 2)},
        "load": {**Primaries.delta(idle1, load1, t2 - t1), "appends": i, "read": len(samples),
                 "latency": quantiles(samples)},
    }


def table(rows: list[dict[str, Any]]) -> None:
    head = (f"{'mode':<24} {'conns':>6} {'idle redis cpu ms/s':>20} {'idle reader cpu ms/s':>21} "
            f"{'load redis cpu ms/s':>20} {'p50 ms':>8} {'p99 ms':>8} {'read/sent':>10}")
    print(head)
    for r in rows:
        print(f"{r['mode']:<24} {r['connections_added']:>6} {r['idle']['redis_cpu_ms_per_s']:>20} "
              f"{r['idle']['reader_cpu_ms_per_s']:>21} {r['load']['redis_cpu_ms_per_s']:>20} "
              f"{r['load']['latency']['p50_ms']:>8} {r['load']['latency']['p99_ms']:>8} "
              f"{r['load']['read']:>5}/{r['load']['appends']:<4}")
    print(f"{'mode':<24} {'idle xreadgroup/s':>18} {'load xreadgroup/s':>18} {'load spublish/s':>16} {'load xadd/s':>12}")
    for r in rows:
        print(f"{r['mode']:<24} {r['idle']['xreadgroup_per_s']:>18} {r['load']['xreadgroup_per_s']:>18} "
              f"{r['load']['spublish_per_s']:>16} {r['load']['xadd_per_s']:>12}")


async def idle_cluster(url: str, idle_s: float) -> dict[str, float]:
    """What the cluster's primaries spend with no reader at all (cluster bus, cron): the floor."""
    primaries = Primaries(url)
    first, started = primaries.snapshot(), time.perf_counter()
    await asyncio.sleep(idle_s)
    return Primaries.delta(first, primaries.snapshot(), time.perf_counter() - started)


async def main(url: str, sessions: int, idle_s: float, load_s: float, rate: int, repeats: int) -> None:
    load_before = os.getloadavg()
    floor = await idle_cluster(url, idle_s)
    print(f"cluster with no reader: redis cpu {floor['redis_cpu_ms_per_s']} ms/s")
    rows = []
    for _ in range(repeats):
        for rings in (False, True):
            rows.append(await run_mode(url, rings, sessions, idle_s, load_s, rate))
    table(rows)
    before = [r for r in rows if r["mode"].startswith("blocked")]
    after = [r for r in rows if r["mode"].startswith("rings")]

    def ratio(path: tuple[str, ...]) -> float:
        def pick(r: dict[str, Any]) -> float:
            value: Any = r
            for part in path:
                value = value[part]
            return float(value)
        b = statistics.median(pick(r) for r in before)
        return round(statistics.median(pick(r) for r in after) / b, 3) if b else float("nan")

    ratios = {"connections": ratio(("connections_added",)),
              "idle_redis_cpu": ratio(("idle", "redis_cpu_ms_per_s")),
              "idle_reader_cpu": ratio(("idle", "reader_cpu_ms_per_s")),
              "load_redis_cpu": ratio(("load", "redis_cpu_ms_per_s")),
              "p50": ratio(("load", "latency", "p50_ms")), "p99": ratio(("load", "latency", "p99_ms"))}
    print("after/before (medians):", "  ".join(f"{k} {v}" for k, v in ratios.items()))
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    report = {"rows": rows, "idle_cluster_no_reader": floor, "ratios_after_vs_before": ratios, "rate_per_s": rate, "idle_s": idle_s,
              "load_s": load_s, "loadavg_before": load_before, "loadavg_after": load_after,
              "note": "one shared 2-core machine; the reader and the appender share one process and loop",
              "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--load-s", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=200, help="appends per second under load")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cluster-url", default=os.environ.get("GAMMA_BENCH_CLUSTER_URL", "redis://127.0.0.1:7000/0"))
    args = parser.parse_args()
    asyncio.run(main(args.cluster_url, args.sessions, args.idle_s, args.load_s, args.rate, args.repeats))
