"""Runtime workers benchmark (`make bench-workers`): not a test, a measurement (issue 19 item 4).

For 1, 2 and 3 runtime processes sharing the sessions (the stack's five services plus extra runtimes,
a redis-server of its own, scripted model): S sessions each send P prompts one after the other (all
sessions at once); reported are prompts answered per second, p50 / p95 latency of an answer, and how
the sessions spread over the workers (lease holders). On this shared 2-core machine the workers
compete for the same cores, so the figure shows the spread and the overhead more than scaling.
Prints a table, writes bench/results/runtime_workers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reliability.chaos import Cluster, lease_holders, worker_pid  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN  # noqa: E402

HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}


def answered(api: httpx.Client, sid: str, text: str) -> bool:
    entries = api.get(f"/sessions/{sid}/transcript").json()["entries"]
    seen = False
    for e in entries:
        msg = e.get("message") or {}
        if e.get("type") == "message" and msg.get("role") == "user" and msg.get("content") == text:
            seen = True
        elif seen and msg.get("role") == "toolResult" and (msg.get("details") or {}).get("blockOnUser"):
            return True
    return False


def one_session(base: str, i: int, prompts: int) -> list[float]:
    latencies = []
    with httpx.Client(base_url=base, headers=HEADERS, timeout=60) as api:
        sid = api.post("/sessions", json={}).json()["id"]
        for n in range(prompts):
            text = f"prompt {n} of session {i}"
            started = time.monotonic()
            assert api.post(f"/sessions/{sid}/messages", json={"message": text}).status_code == 202
            while not answered(api, sid, text):
                if time.monotonic() - started > 120:
                    raise SystemExit(f"{sid}: {text!r} not answered in 120 s")
                time.sleep(0.1)
            latencies.append(time.monotonic() - started)
    return latencies


def run(workers: int, sessions: int, prompts: int) -> dict[str, Any]:
    redis_base, redis_proc = start_redis_server()
    cluster = Cluster(redis_base + "/0", Path(tempfile.mkdtemp(prefix="bench-workers-")), extra_runtimes=workers - 1,
                      GAMMA_LEASE_MS="15000", GAMMA_IDLE_S="600", GAMMA_SESSION_CREATES_PER_MINUTE="100000")
    r = redis.Redis.from_url(redis_base + "/0")
    try:
        cluster.start()
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=sessions) as pool:
            results = list(pool.map(lambda i: one_session(cluster.stack.url(), i, prompts), range(sessions)))
        elapsed = time.monotonic() - started
        spread = Counter(worker_pid(w) for w, _ in lease_holders(r).values())
        lat = sorted(x for per in results for x in per)
        return {"workers": workers, "sessions": sessions, "prompts": sessions * prompts, "elapsed_s": round(elapsed, 2),
                "prompts_per_s": round(sessions * prompts / elapsed, 2),
                "answer_p50_s": round(statistics.median(lat), 3), "answer_p95_s": round(lat[int(len(lat) * 0.95) - 1], 3),
                "sessions_per_worker": sorted(spread.values(), reverse=True),
                # The machine is shared (other engineers' stacks and tests): its 1-minute load average.
                "loadavg_1m_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)]}
    finally:
        cluster.stop()
        r.close()
        redis_proc.terminate()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=24)
    ap.add_argument("--prompts", type=int, default=3)
    args = ap.parse_args()
    rows = [run(w, args.sessions, args.prompts) for w in (1, 2, 3)]
    base = rows[0]["prompts_per_s"]
    print(f"\n{'workers':>8}{'prompts':>9}{'prompts/s':>11}{'vs 1':>7}{'p50 s':>8}{'p95 s':>8}  sessions per worker"
          "  (load avg before/after)")
    for row in rows:
        row["throughput_vs_one_worker"] = round(row["prompts_per_s"] / base, 2) if base else None
        print(f"{row['workers']:>8}{row['prompts']:>9}{row['prompts_per_s']:>11}{row['throughput_vs_one_worker']:>7}"
              f"{row['answer_p50_s']:>8}{row['answer_p95_s']:>8}  {row['sessions_per_worker']}"
              f"  {row['loadavg_1m_before_after']}")
    out = ROOT / "bench" / "results" / "runtime_workers.json"
    out.write_text(json.dumps({"cpus": os.cpu_count(), "runs": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
