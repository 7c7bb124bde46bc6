"""Dormant-session memory benchmark (`make bench-dormant`): not a test, a measurement (issue 19 item 3).

N sessions are made live through the real stack (proxy, runtime, notifications, digest, compaction as
processes, scripted model, a redis-server of its own), each answers one prompt, and is suspended, in
batches. Then Redis memory is taken twice: dormant before the retention window ended (what every
dormant session cost before issue 19: its streams stayed forever) and after the runtime's sweep
(`shared.dormancy.sweep_due`, the code the runtime runs, called here with a clock past the window so
the bench need not wait GAMMA_DORMANT_RETENTION_S). Per dormant session: the sum of `MEMORY USAGE`
of its keys (plus its share of the user's index) and the `INFO memory` used_memory delta over the
baseline divided by N. A few sessions are then woken with a prompt to show a wake after the sweep works.

N=1000 by default (on a shared 2-core machine; the per-session keys are independent, so the figure
per session is what 10,000 cost each, times 10,000). Prints a table, writes bench/results/dormant_memory.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared import dormancy, keys  # noqa: E402
from shared.contracts.base import now_ms  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, Stack  # noqa: E402

HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}
USER = "alice"
TARGET_BYTES = 1024
UNANSWERED: list[str] = []
PROMPTS = {"plain": "hello, what can you do?", "deck": "Create a presentation about our Q3 results"}


MEMORY_FIELDS = ("used_memory", "used_memory_dataset", "mem_clients_normal")


def used_memory(r: redis.Redis) -> dict[str, int]:
    """INFO memory: all of it, the dataset alone (keys and values), and client buffers (connections
    the services and this bench hold; not per session)."""
    time.sleep(6.0)  # the services trim their acknowledged service-stream entries every 5 s
    r.execute_command("MEMORY", "PURGE")
    info = r.info("memory")
    out = {f: int(info[f]) for f in MEMORY_FIELDS}
    out["all_keys_memory_usage"] = sum(int(r.execute_command("MEMORY", "USAGE", k, "SAMPLES", "0") or 0)
                                       for k in r.scan_iter(count=1000))
    return out


def per_session_delta(now: dict[str, int], base: dict[str, int], n: int) -> dict[str, float]:
    return {f + "_delta_per_session": round((now[f] - base[f]) / n, 1) for f in (*MEMORY_FIELDS, "all_keys_memory_usage")}


def session_memory(r: redis.Redis, sids: list[str]) -> dict[str, Any]:
    """MEMORY USAGE of every key under each session's hash tag, by key kind."""
    by_kind: dict[str, int] = {}
    counts: dict[str, int] = {}
    encodings: dict[str, dict[str, int]] = {}
    total = 0
    for sid in sids:
        prefix = "gamma:{" + sid + "}:"
        names = list(r.scan_iter(match=prefix + "*", count=1000))
        pipe = r.pipeline(transaction=False)
        for name in names:
            pipe.execute_command("MEMORY", "USAGE", name, "SAMPLES", "0")
            pipe.object("encoding", name)
        replies = pipe.execute()
        for name, size, encoding in zip(names, replies[::2], replies[1::2], strict=True):
            kind = name.decode()[len(prefix):].split(":")[0]
            by_kind[kind] = by_kind.get(kind, 0) + int(size or 0)
            counts[kind] = counts.get(kind, 0) + 1
            enc = encodings.setdefault(kind, {})
            label = encoding.decode() if isinstance(encoding, bytes) else str(encoding)
            enc[label] = enc.get(label, 0) + 1
            total += int(size or 0)
    index = int(r.execute_command("MEMORY", "USAGE", keys.user_sessions(USER), "SAMPLES", "0") or 0)
    n = len(sids)
    return {"per_session_bytes": round((total + index) / n, 1),
            "keys_per_session": round(sum(counts.values()) / n, 2),
            "by_key": {k: {"keys": counts[k], "bytes_per_session": round(v / n, 1), "encodings": encodings[k]}
                       for k, v in sorted(by_kind.items())},
            "user_index_bytes_per_session": round(index / n, 1)}


def other_keys(r: redis.Redis, top: int = 12) -> dict[str, Any]:
    """What else holds memory (service streams, dedupe keys...): by pattern, with a TTL or not."""
    groups: dict[str, dict[str, int]] = {}
    for name in r.scan_iter(count=1000):
        text = name.decode()
        if text.startswith("gamma:{"):
            continue
        pattern = text.split(":")[0] + ":" + text.split(":")[1] if text.count(":") else text
        if text.startswith("gamma:once:"):
            pattern = "gamma:once:" + text.split(":")[2] + ":*"
        g = groups.setdefault(pattern, {"keys": 0, "bytes": 0, "with_ttl": 0})
        g["keys"] += 1
        g["bytes"] += int(r.execute_command("MEMORY", "USAGE", name, "SAMPLES", "0") or 0)
        g["with_ttl"] += r.pttl(name) > 0
    return dict(sorted(groups.items(), key=lambda kv: -kv[1]["bytes"])[:top])


def answered(r: redis.Redis, sids: list[str]) -> set[str]:
    """Sessions whose last run ended (an `agent_end` among their newest events)."""
    pipe = r.pipeline(transaction=False)
    for sid in sids:
        pipe.xrevrange(keys.events(sid), count=20)
    done = set()
    for sid, entries in zip(sids, pipe.execute(), strict=True):
        if any(b'"agent_end"' in fields.get(b"data", b"") for _, fields in entries):
            done.add(sid)
    return done


def live_batch(api: httpx.Client, r: redis.Redis, pool: ThreadPoolExecutor, n: int, prompt: str) -> list[str]:
    def create(_: int) -> str:
        resp = api.post("/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid = str(resp.json()["id"])
        resp = api.post(f"/sessions/{sid}/messages", json={"message": prompt})
        assert resp.status_code == 202, resp.text
        return sid

    sids = list(pool.map(create, range(n)))
    deadline = time.time() + 300
    while len(answered(r, sids)) < len(sids):
        if time.time() > deadline:  # reported, not fatal: the memory of a dormant session is what is measured
            print(f"  only {len(answered(r, sids))}/{len(sids)} answered in 300 s", flush=True)
            UNANSWERED.extend(set(sids) - answered(r, sids))
            break
        time.sleep(0.2)

    def suspend(sid: str) -> None:
        resp = api.post(f"/sessions/{sid}/suspend", timeout=60)
        assert resp.status_code == 200, resp.text

    list(pool.map(suspend, sids))
    return sids


def settle_dormant(api: httpx.Client, r: redis.Redis, pool: ThreadPoolExecutor, sids: list[str]) -> int:
    """Every session dormant (no lease) before measuring. On a starved machine a runtime can lose a lease
    (its renewal late) while closing a session, whose orphan scan then resumes it: suspend those again.
    Returns how many needed it."""
    again: set[str] = set()
    for _ in range(10):
        live = [sid for sid in sids if r.exists(keys.lease(sid))]
        if not live:
            return len(again)
        again.update(live)
        list(pool.map(lambda sid: api.post(f"/sessions/{sid}/suspend", timeout=60), live))
        time.sleep(2.0)
    raise SystemExit(f"still live after ten suspends: {len(live)} sessions")


def sweep_all(redis_url: str) -> dict[str, int]:
    async def run() -> dict[str, int]:
        import redis.asyncio as aioredis

        client = aioredis.from_url(redis_url)
        total = {"swept": 0, "inbox_kept": 0, "live": 0}
        try:
            while await client.zcard(keys.DORMANT_DUE):
                got = await dormancy.sweep_due(client, now=now_ms() + 10 * 24 * 3600 * 1000, limit=500)
                for k, v in got.model_dump().items():
                    total[k] += v
        finally:
            await client.aclose()
        return total

    return asyncio.run(run())


def wake_some(api: httpx.Client, r: redis.Redis, sids: list[str]) -> float:
    started = time.time()
    for sid in sids:
        assert api.post(f"/sessions/{sid}/messages", json={"message": "good morning"}).status_code == 202
    deadline = time.time() + 120
    while True:
        ok = [sid for sid in sids if r.exists(keys.events(sid)) and answered(r, [sid])]
        if len(ok) == len(sids):
            return time.time() - started
        if time.time() > deadline:
            raise SystemExit(f"woken after the sweep but not answered: {sorted(set(sids) - set(ok))}")
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--prompt", choices=sorted(PROMPTS), default="deck")
    args = ap.parse_args()
    redis_base, redis_proc = start_redis_server()
    url = redis_base + "/0"
    stack = Stack(redis_url=url, data_dir=Path(tempfile.mkdtemp(prefix="bench-dormant-")),
                  env_overrides={"GAMMA_MAX_SESSIONS_PER_USER": str(args.n + 10),
                                 "GAMMA_SESSION_CREATES_PER_MINUTE": "1000000",
                                 # The tests' 3 s lease is lost under a 50-session burst on a loaded machine.
                                 "GAMMA_LEASE_MS": "30000",
                                 # As deployed (the test stack keeps service streams for an hour to read them).
                                 "GAMMA_STREAM_TRIM_INTERVAL_S": "5",
                                 # Long: the "before" figure is taken while dormant; the bench then sweeps.
                                 "GAMMA_DORMANT_RETENTION_S": "86400"})
    r = redis.Redis.from_url(url)
    try:
        stack.start()
        baseline = used_memory(r)
        sids: list[str] = []
        started = time.time()
        with httpx.Client(base_url=stack.url(), headers=HEADERS, timeout=60) as api, \
                ThreadPoolExecutor(max_workers=16) as pool:
            while len(sids) < args.n:
                sids += live_batch(api, r, pool, min(args.batch, args.n - len(sids)), PROMPTS[args.prompt])
                print(f"  {len(sids)}/{args.n} sessions live then dormant ({time.time() - started:.0f} s)", flush=True)
            resuspended = settle_dormant(api, r, pool, sids)
            before_used = used_memory(r)
            before = session_memory(r, sids)
            swept = sweep_all(url)
            after_used = used_memory(r)
            after = session_memory(r, sids)
            others = other_keys(r)
            wake_s = wake_some(api, r, sids[:5])
        result = {
            "n": args.n, "prompt": args.prompt, "python": platform.python_version(),
            "redis": r.info("server")["redis_version"], "live_then_dormant_s": round(time.time() - started, 1),
            "baseline_info_memory": baseline,
            "dormant_before_sweep": {**before, **per_session_delta(before_used, baseline, args.n)},
            "dormant_after_sweep": {**after, **per_session_delta(after_used, baseline, args.n)},
            "unanswered_before_suspend": len(UNANSWERED), "suspended_again_after_an_orphan_resume": resuspended,
            "loadavg_1m_at_end": round(os.getloadavg()[0], 1), "sweep": swept, "largest_other_keys": others, "five_wakes_after_sweep_s": round(wake_s, 2), "target_bytes": TARGET_BYTES,
            "extrapolated_10k_after_mib": round(after["per_session_bytes"] * 10_000 / 2**20, 2),
            "extrapolated_10k_before_mib": round(before["per_session_bytes"] * 10_000 / 2**20, 2),
        }
        result["meets_target"] = after["per_session_bytes"] <= TARGET_BYTES
        print_table(result)
        out = ROOT / "bench" / "results" / "dormant_memory.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out.relative_to(ROOT)}")
    finally:
        stack.stop()
        r.close()
        redis_proc.terminate()


def print_table(result: dict[str, Any]) -> None:
    b, a = result["dormant_before_sweep"], result["dormant_after_sweep"]
    print(f"\n{result['n']} dormant sessions ({result['prompt']} prompt each), bytes per session")
    print(f"{'':34}{'before sweep':>14}{'after sweep':>14}")
    print(f"{'sum of MEMORY USAGE (+ index)':34}{b['per_session_bytes']:>14}{a['per_session_bytes']:>14}")
    for f in (*MEMORY_FIELDS, "all_keys_memory_usage"):
        name = f"INFO {f} delta / N"
        print(f"{name:34}{b[f + '_delta_per_session']:>14}{a[f + '_delta_per_session']:>14}")
    print(f"{'keys per session':34}{b['keys_per_session']:>14}{a['keys_per_session']:>14}")
    for kind in sorted(set(b["by_key"]) | set(a["by_key"])):
        bb = b["by_key"].get(kind, {}).get("bytes_per_session", 0)
        aa = a["by_key"].get(kind, {}).get("bytes_per_session", 0)
        print(f"{'  ' + kind:34}{bb:>14}{aa:>14}")
    print(f"{'10,000 sessions (MiB)':34}{result['extrapolated_10k_before_mib']:>14}{result['extrapolated_10k_after_mib']:>14}")
    print(f"target <= {result['target_bytes']} B per dormant session: {'met' if result['meets_target'] else 'NOT met'}")


if __name__ == "__main__":
    main()
