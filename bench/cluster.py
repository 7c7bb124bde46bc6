"""`make bench-cluster`: what a Redis Cluster costs the two paths it changes, beside a single Redis.

1. WAIT: `shared.streams.inbox.append` (the 202 of a prompt) one after another: on the single Redis (no
   WAIT), on the cluster with `WAIT 1 <GAMMA_REDIS_WAIT_MS>` after each append, and without it.
2. Inbox reads grouped by slot: the runtime's `InboxReader` holding S sessions, one append at a time
   to a random one, append -> entry read latency; on a single Redis one XREADGROUP names up to 32
   inboxes, on a cluster only the inboxes of one slot (each session its own, in practice), so the
   reader held S blocked reads instead of S/32; now it holds one ring subscription per node
   (shared/streams/inbox_rings.py, bench/cluster_inbox.py).

Needs a single Redis (REDIS_URL) and a cluster node (GAMMA_BENCH_CLUSTER_URL, or --cluster-url).
Writes bench/results/cluster.json. One shared 2-core machine: read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
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

from shared.contracts.streams.inbox import UserPrompt  # noqa: E402
from shared.redis import keys  # noqa: E402
from shared.redis.reconnect import connect, connect_blocking  # noqa: E402
from shared.streams import inbox  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "cluster.json"


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"n": len(ordered), "p50_ms": round(q[49] * 1000, 3), "p99_ms": round(q[98] * 1000, 3),
            "mean_ms": round(statistics.fmean(ordered) * 1000, 3)}


def prompt(sid: str, i: int) -> UserPrompt:
    return UserPrompt(session_id=sid, prompt_id=f"p{i}", message=f"bench {i}")


async def append_latency(url: str, n: int, wait_ms: str) -> dict[str, float]:
    os.environ["GAMMA_REDIS_WAIT_MS"] = wait_ms
    client = connect(url)
    sid = "bench-" + uuid.uuid4().hex[:8]
    samples = []
    try:
        for i in range(n):
            started = time.perf_counter()
            await inbox.append(client, prompt(sid, i))
            samples.append(time.perf_counter() - started)
    finally:
        await client.delete(keys.inbox(sid))
        await client.aclose()
    return stats(samples)


async def read_latency(url: str, sessions: int, n: int) -> dict[str, Any]:
    os.environ["GAMMA_REDIS_WAIT_MS"] = "0"
    client, blocking = connect(url), connect_blocking(url, 1.0)
    reader = inbox.InboxReader(blocking, "bench-reader")
    sids = [f"bench-{uuid.uuid4().hex[:10]}" for _ in range(sessions)]
    for sid in sids:
        await reader.add(sid)
    sent: dict[str, float] = {}
    samples: list[float] = []

    async def consume() -> None:
        while len(samples) < n:
            for entry in await reader.read(block_ms=1000):
                samples.append(time.perf_counter() - sent[getattr(entry.message, "prompt_id", "")])
                await reader.ack(entry.session_id, entry.entry_id)

    task = asyncio.create_task(consume())
    try:
        await asyncio.sleep(0.5)  # every shard's read in flight
        for i in range(n):
            sent[f"p{i}"] = time.perf_counter()
            await inbox.append(client, prompt(random.choice(sids), i))
            await asyncio.sleep(0.002)
        await asyncio.wait_for(task, 60)
    finally:
        task.cancel()
        # Blocked reads (one per shard) or, on a cluster, ring subscriptions (one per node).
        shards = reader.rings.connections if reader.rings is not None else reader.streams.shard_count
        await reader.close()
        for sid in sids:
            await client.delete(keys.inbox(sid))
        await client.aclose()
        await blocking.aclose()
    return {**stats(samples), "sessions": sessions, "blocked_reads": shards}


async def main(single: str, cluster: str, n: int, sessions: int) -> dict[str, Any]:
    await append_latency(single, 200, "0")  # warm-up
    await append_latency(cluster, 200, "250")
    append = {"single": await append_latency(single, n, "0"),
              "cluster_wait": await append_latency(cluster, n, "250"),
              "cluster_nowait": await append_latency(cluster, n, "0")}
    reads = {"single": await read_latency(single, sessions, n // 2),
             "cluster": await read_latency(cluster, sessions, n // 2)}
    os.environ.pop("GAMMA_REDIS_WAIT_MS", None)
    report = {
        "append": append,
        "wait_cost_p50_ms": round(append["cluster_wait"]["p50_ms"] - append["cluster_nowait"]["p50_ms"], 3),
        "append_p50_ratio_cluster_wait_vs_single": round(append["cluster_wait"]["p50_ms"] / append["single"]["p50_ms"], 2),
        "inbox_reads": reads,
        "read_p50_ratio_cluster_vs_single": round(reads["cluster"]["p50_ms"] / reads["single"]["p50_ms"], 2),
        "note": "one shared 2-core machine (other engineers' work, six cluster nodes): ratios, not absolutes",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"{'append (inbox 202)':<22} {'p50 ms':>8} {'p99 ms':>8}")
    for name, row in append.items():
        print(f"{name:<22} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f}")
    print(f"{'inbox read':<22} {'p50 ms':>8} {'p99 ms':>8} {'blocked reads':>14}")
    for name, row in reads.items():
        print(f"{name:<22} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} {row['blocked_reads']:>14}")
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--cluster-url", default=os.environ.get("GAMMA_BENCH_CLUSTER_URL", "redis://127.0.0.1:7000/0"))
    args = parser.parse_args()
    asyncio.run(main(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), args.cluster_url, args.n, args.sessions))
