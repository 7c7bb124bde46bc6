"""Dormant-session memory benchmark (`make bench-dormant`): not a test, a measurement (docs/integration.md "Dormant sessions in Redis").

N sessions (10,000 by default) are made live through the real stack (the five services as processes,
scripted model, a redis-server of its own), each answers one prompt (`plain`: a short answer, the
default; `deck`: the whole deck flow with the sandboxed tools, ~1 s a session) and is suspended, in
batches. Redis memory is taken at four points, each with INFO memory, MEMORY STATS and one walk of
the keyspace (bench/dormant_accounting.py):
  baseline       the stack started, no session;
  half           N/2 sessions dormant and swept (`shared.redis.dormancy.sweep_due` of the services' tree, with
                 a clock past GAMMA_DORMANT_RETENTION_S so the bench need not wait for it);
  before_sweep   N/2 more dormant, not yet swept (what a dormant session costs without the sweep);
  after_sweep    all N swept.
Per dormant session: MEMORY USAGE of its keys by kind, plus its share of the user's index; INFO's
used_memory per session both as an average over the baseline (fixed costs included) and as the
marginal cost between `half` and `after_sweep` (what one more dormant session adds: fixed costs such
as client buffers, Lua caches and the bounded service streams cancel out). The global keys are listed
by pattern with their TTLs. `--src` runs the services (and their sweep) from another tree, for a
baseline; `--compare` puts an earlier JSON beside this one with ratios.
Prints a table, writes bench/results/dormant_memory.json (or --out). Records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
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

from bench import dormant_accounting as acc  # noqa: E402
from bench.dormant_report import print_table, summarize  # noqa: E402
from shared.redis import keys  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, Stack  # noqa: E402

HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}
PROMPTS = {"plain": "hello, what can you do?", "deck": "Create a presentation about our Q3 results"}
LOADS: list[float] = []
SLOW_SUSPENDS: list[int] = []

# Run in the services' tree (--src) so a baseline is swept by its own code. argv: the Redis URL.
SWEEP_CODE = """
import asyncio, sys
import redis.asyncio as aioredis
from shared.redis import dormancy, keys
from shared.contracts.base import now_ms

async def main():
    client = aioredis.from_url(sys.argv[1])
    swept = 0
    while await client.zcard(keys.DORMANT_DUE):
        swept += (await dormancy.sweep_due(client, now=now_ms() + 10 * 24 * 3600 * 1000, limit=500)).swept
    await client.aclose()
    print(swept)

asyncio.run(main())
"""


def answered(r: redis.Redis, sids: list[str]) -> set[str]:
    """Sessions whose last run ended (an `agent_end` among their newest events)."""
    pipe = r.pipeline(transaction=False)
    for sid in sids:
        pipe.xrevrange(keys.events(sid), count=20)
    return {sid for sid, entries in zip(sids, pipe.execute(), strict=True)
            if any(b'"agent_end"' in fields.get(b"data", b"") for _, fields in entries)}


def live_batch(api: httpx.Client, r: redis.Redis, pool: ThreadPoolExecutor, n: int, prompt: str) -> tuple[list[str], int]:
    """n sessions created, prompted, answered (or 300 s passed: reported, not fatal) and suspended."""
    def create(_: int) -> str:
        resp = api.post("/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid = str(resp.json()["id"])
        resp = api.post(f"/sessions/{sid}/messages", json={"message": prompt})
        assert resp.status_code == 202, resp.text
        return sid

    sids = list(pool.map(create, range(n)))
    deadline = time.time() + 300
    while len(done := answered(r, sids)) < len(sids) and time.time() < deadline:
        time.sleep(0.2)

    def suspend(sid: str) -> bool:
        # A loaded runtime may not answer within the proxy's 10 s (504): settle_dormant suspends it again.
        resp = api.post(f"/sessions/{sid}/suspend", timeout=60)
        assert resp.status_code in (200, 504), resp.text
        return resp.status_code == 200

    SLOW_SUSPENDS.append(sum(not ok for ok in pool.map(suspend, sids)))
    return sids, len(sids) - len(done)


def settle_dormant(api: httpx.Client, r: redis.Redis, pool: ThreadPoolExecutor, sids: list[str]) -> int:
    """Every session dormant (no lease) before measuring. On a starved machine a runtime can lose a lease
    (its renewal late) while closing a session, whose orphan scan then resumes it: suspend those again.
    Returns how many needed it."""
    again: set[str] = set()
    for _ in range(10):
        pipe = r.pipeline(transaction=False)
        for sid in sids:
            pipe.exists(keys.lease(sid))
        live = [sid for sid, held in zip(sids, pipe.execute(), strict=True) if held]
        if not live:
            return len(again)
        again.update(live)
        list(pool.map(lambda sid: api.post(f"/sessions/{sid}/suspend", timeout=60), live))
        time.sleep(2.0)
    raise SystemExit(f"still live after ten suspends: {len(live)} sessions")


def sweep_all(redis_url: str, src: Path) -> int:
    out = subprocess.run([sys.executable, "-c", SWEEP_CODE, redis_url], cwd=src, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(src)}, timeout=1800, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def make_dormant(api: httpx.Client, r: redis.Redis, pool: ThreadPoolExecutor, args: argparse.Namespace,
                 count: int, done_before: int, started: float) -> tuple[list[str], int]:
    sids: list[str] = []
    unanswered = 0
    while len(sids) < count:
        got, missing = live_batch(api, r, pool, min(args.batch, count - len(sids)), PROMPTS[args.prompt])
        sids += got
        unanswered += missing
        LOADS.append(os.getloadavg()[0])
        total, elapsed = done_before + len(sids), time.time() - started
        eta = elapsed / total * (args.n - total)
        print(f"  {total}/{args.n} live then dormant, {elapsed:.0f} s, {total / elapsed:.0f}/s, eta {eta:.0f} s,"
              f" load {LOADS[-1]:.1f}" + (f", {unanswered} unanswered" if unanswered else ""), flush=True)
    return sids, unanswered


def wake_some(api: httpx.Client, r: redis.Redis, sids: list[str]) -> float:
    """A wake after the sweep works: each of `sids` answers a prompt."""
    started = time.time()
    for sid in sids:
        assert api.post(f"/sessions/{sid}/messages", json={"message": "good morning"}).status_code == 202
    deadline = time.time() + 120
    while len(answered(r, sids)) < len(sids):
        if time.time() > deadline:
            raise SystemExit(f"woken after the sweep but not answered: {sorted(set(sids) - answered(r, sids))}")
        time.sleep(0.2)
    return time.time() - started


def run(args: argparse.Namespace, stack: Stack, r: redis.Redis, url: str) -> dict[str, Any]:
    snaps: dict[str, Any] = {"baseline": acc.snapshot(r, 0)}
    started, half = time.time(), args.n // 2
    phases: dict[str, float] = {}
    with httpx.Client(base_url=stack.url(), headers=HEADERS, timeout=60,
                      limits=httpx.Limits(max_connections=args.concurrency)) as api, \
            ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        first, missing1 = make_dormant(api, r, pool, args, half, 0, started)
        again = settle_dormant(api, r, pool, first)
        t = time.time()
        swept = sweep_all(url, stack.src or ROOT)
        phases["sweep_first_half_s"] = round(time.time() - t, 1)
        snaps["half"] = acc.snapshot(r, 0)
        second, missing2 = make_dormant(api, r, pool, args, args.n - half, half, started)
        again += settle_dormant(api, r, pool, second)
        phases["live_then_dormant_s"] = round(time.time() - started - phases["sweep_first_half_s"], 1)
        snaps["before_sweep"] = acc.snapshot(r, 0)
        t = time.time()
        swept += sweep_all(url, stack.src or ROOT)
        phases["sweep_second_half_s"] = round(time.time() - t, 1)
        snaps["after_sweep"] = acc.snapshot(r, 0)
        pipe = r.pipeline(transaction=False)
        for sid in first + second:
            pipe.exists(keys.lease(sid))
        leftovers = {"runtime_live_members": r.zcard(keys.RUNTIME_LIVE), "dormant_due_members": r.zcard(keys.DORMANT_DUE),
                     "leases": sum(pipe.execute())}
        wake_s = wake_some(api, r, first[:5])
    return {"snapshots": snaps, "phases": phases, "swept": swept, "unanswered_before_suspend": missing1 + missing2,
            "suspended_again_after_an_orphan_resume_or_a_late_suspend": again, "suspends_answered_late": sum(SLOW_SUSPENDS),
            "five_wakes_after_sweep_s": round(wake_s, 2),
            "half": half, "leftovers_at_the_end": leftovers}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=32, help="client threads (and HTTP connections)")
    ap.add_argument("--prompt", choices=sorted(PROMPTS), default="plain")
    ap.add_argument("--src", type=Path, default=None, help="run the services (and the sweep) from this tree")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--compare", type=Path, default=None, help="an earlier result JSON to show side by side")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "dormant_memory.json")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    redis_base, redis_proc = start_redis_server()
    url = redis_base + "/0"
    stack = Stack(redis_url=url, data_dir=Path(tempfile.mkdtemp(prefix="bench-dormant-")), src=args.src,
                  env_overrides={"GAMMA_MAX_SESSIONS_PER_USER": str(args.n + 10),
                                 "GAMMA_SESSION_CREATES_PER_MINUTE": "1000000",
                                 # The tests' 3 s lease is lost under a burst on a loaded machine.
                                 "GAMMA_LEASE_MS": "30000",
                                 # As deployed (the test stack keeps service streams for an hour to read them).
                                 "GAMMA_STREAM_TRIM_INTERVAL_S": "5",
                                 # Long: `before_sweep` is taken while dormant; the bench sweeps itself.
                                 "GAMMA_DORMANT_RETENTION_S": "86400"})
    r = redis.Redis.from_url(url)
    load_start = os.getloadavg()[0]
    try:
        stack.start()
        measured = run(args, stack, r, url)
        compare = json.loads(args.compare.read_text()) if args.compare else None
        result = summarize(args, measured, compare, platform.python_version(), r.info("server")["redis_version"],
                           {"start_1m": round(load_start, 1), "max_1m_sampled": round(max(LOADS, default=0.0), 1),
                            "end_1m": round(os.getloadavg()[0], 1)})
        print_table(result)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    finally:
        stack.stop()
        r.close()
        redis_proc.terminate()


if __name__ == "__main__":
    main()
