"""Runtime workers benchmark (`make bench-workers`): not a test, a measurement (docs/architecture.md "Runtime workers").

For 1, 2 and 3 runtime processes sharing the sessions (the stack's five services plus extra runtimes,
a redis-server of its own, scripted model): S sessions (default 120) each send P prompts (default 5)
one after the other, all sessions at once; each prompt is timed from its POST to the answer's
`message_user` event on the session's SSE stream (no transcript polling: 120 pollers measured the
proxy). Each worker count runs `--repeats` times (default 2). Reported: prompts answered per second,
p50 / p95 answer latency, how the sessions spread over the workers (lease holders), and the machine's
1-minute load average (it is shared). `--baseline FILE` (an earlier JSON) prints both side by side
with ratios. Writes bench/results/runtime_workers.json (or `--out`).
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
from collections.abc import Iterator
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


def answers(lines: Iterator[str]) -> Iterator[None]:
    """One item per answer (`message_user` ending the run) on a session's SSE stream."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        if event.get("type") == "message_user" and (event.get("data") or {}).get("block_on_user"):
            yield None


def one_session(base: str, i: int, prompts: int) -> list[float]:
    latencies = []
    # Pooled connections are dropped before uvicorn's 5 s keep-alive ends: a POST sent on one the
    # server is closing just then fails with "Server disconnected" (answers can take > 5 s here).
    with httpx.Client(base_url=base, headers=HEADERS, timeout=120, limits=httpx.Limits(keepalive_expiry=2.0)) as api:
        sid = api.post("/sessions", json={}).json()["id"]
        with api.stream("GET", f"/sessions/{sid}/events") as stream:
            answered = answers(stream.iter_lines())
            for n in range(prompts):
                started = time.monotonic()
                reply = api.post(f"/sessions/{sid}/messages", json={"message": f"prompt {n} of session {i}"})
                assert reply.status_code == 202, reply.text
                next(answered)  # the SSE read times out (120 s) if no answer comes
                latencies.append(time.monotonic() - started)
    return latencies


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_process(cluster: Cluster, redis_pid: int) -> dict[str, float]:
    pids = {name: proc.pid for name, proc in cluster.procs().items()} | {"redis": redis_pid}
    return {name: cpu_s(pid) for name, pid in pids.items()}


def run(workers: int, sessions: int, prompts: int) -> dict[str, Any]:
    redis_base, redis_proc = start_redis_server()
    cluster = Cluster(redis_base + "/0", Path(tempfile.mkdtemp(prefix="bench-workers-")), extra_runtimes=workers - 1,
                      GAMMA_LEASE_MS="15000", GAMMA_IDLE_S="600", GAMMA_SESSION_CREATES_PER_MINUTE="100000",
                      GAMMA_SSE_MAX_STREAMS_PER_USER=str(sessions + 16))
    r = redis.Redis.from_url(redis_base + "/0")
    try:
        cluster.start()
        load_before = os.getloadavg()[0]
        cpu_before = cpu_by_process(cluster, redis_proc.pid)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=sessions) as pool:
            results = list(pool.map(lambda i: one_session(cluster.stack.url(), i, prompts), range(sessions)))
        elapsed = time.monotonic() - started
        cpu = {name: round(value - cpu_before[name], 2) for name, value in cpu_by_process(cluster, redis_proc.pid).items()}
        runtime_cpu = sorted((v for k, v in cpu.items() if k.startswith("runtime")), reverse=True)
        first = sorted(per[0] for per in results)
        spread = Counter(worker_pid(w) for w, _ in lease_holders(r).values())
        lat = sorted(x for per in results for x in per)
        return {"workers": workers, "sessions": sessions, "prompts": sessions * prompts, "elapsed_s": round(elapsed, 2),
                "prompts_per_s": round(sessions * prompts / elapsed, 2),
                "answer_p50_s": round(statistics.median(lat), 3), "answer_p95_s": round(lat[int(len(lat) * 0.95) - 1], 3),
                "sessions_per_worker": sorted(spread.values(), reverse=True),
                # The wake burst: each session's first answer waits for its wake.
                "first_answer_p50_s": round(statistics.median(first), 3),
                "first_answer_p95_s": round(first[int(len(first) * 0.95) - 1], 3),
                # CPU seconds per process over the run: the runtimes' split, and what one prompt costs.
                "cpu_s": cpu, "runtime_cpu_s_per_worker": runtime_cpu,
                "runtime_cpu_ms_per_prompt": round(sum(runtime_cpu) * 1000 / (sessions * prompts), 2),
                # The machine is shared (other engineers' stacks and tests): its 1-minute load average.
                "loadavg_1m_before_after": [round(load_before, 1), round(os.getloadavg()[0], 1)]}
    finally:
        cluster.stop()
        r.close()
        redis_proc.terminate()


def summarize(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per worker count: the median of its runs' prompts/s and latencies, every run's spread."""
    out: dict[int, dict[str, Any]] = {}
    for workers in sorted({r["workers"] for r in rows}):
        runs = [r for r in rows if r["workers"] == workers]
        out[workers] = {"prompts_per_s": round(statistics.median(r["prompts_per_s"] for r in runs), 2),
                        "answer_p50_s": round(statistics.median(r["answer_p50_s"] for r in runs), 3),
                        "answer_p95_s": round(statistics.median(r["answer_p95_s"] for r in runs), 3),
                        "first_answer_p95_s": round(statistics.median(r["first_answer_p95_s"] for r in runs), 3),
                        "runtime_cpu_ms_per_prompt": round(statistics.median(r["runtime_cpu_ms_per_prompt"]
                                                                             for r in runs), 2),
                        "runtime_cpu_s_per_worker": [r["runtime_cpu_s_per_worker"] for r in runs],
                        "spreads": [r["sessions_per_worker"] for r in runs],
                        "loadavg": [r["loadavg_1m_before_after"] for r in runs]}
    return out


def table(summary: dict[int, dict[str, Any]], baseline: dict[int, dict[str, Any]] | None) -> None:
    one = summary[min(summary)]["prompts_per_s"]
    print(f"\n{'workers':>8}{'prompts/s':>11}{'vs 1':>7}{'p50 s':>8}{'p95 s':>8}{'1st p95 s':>10}{'cpu ms/prompt':>14}"
          "  sessions per worker (each run)  runtime CPU s per worker  load avg before/after")
    for workers, row in summary.items():
        print(f"{workers:>8}{row['prompts_per_s']:>11}{round(row['prompts_per_s'] / one, 2):>7}{row['answer_p50_s']:>8}"
              f"{row['answer_p95_s']:>8}{row['first_answer_p95_s']:>10}{row['runtime_cpu_ms_per_prompt']:>14}"
              f"  {row['spreads']}  {row['runtime_cpu_s_per_worker']}  {row['loadavg']}")
    if baseline:
        print(f"\n{'workers':>8}{'before p/s':>12}{'after p/s':>11}{'ratio':>7}{'before p95':>12}{'after p95':>11}"
              f"{'1st p95 before':>16}{'after':>7}  spread before -> after")
        for workers, row in summary.items():
            old = baseline.get(workers)
            if old is None:
                continue
            print(f"{workers:>8}{old['prompts_per_s']:>12}{row['prompts_per_s']:>11}"
                  f"{round(row['prompts_per_s'] / old['prompts_per_s'], 2):>7}{old['answer_p95_s']:>12}"
                  f"{row['answer_p95_s']:>11}{old.get('first_answer_p95_s', '-'):>16}{row['first_answer_p95_s']:>7}"
                  f"  {old['spreads']} -> {row['spreads']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=120)
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", default="1,2,3")
    ap.add_argument("--baseline", type=Path, help="an earlier result JSON to compare with")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "runtime_workers.json")
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    # Interleaved (1, 2, 3, 1, 2, 3): a change in the machine's load hits every worker count alike.
    rows = [run(w, args.sessions, args.prompts) for _ in range(args.repeats) for w in counts]
    summary = summarize(rows)
    baseline = None
    if args.baseline is not None:
        baseline = {int(k): v for k, v in json.loads(args.baseline.read_text())["summary"].items()}
    table(summary, baseline)
    args.out.write_text(json.dumps({"cpus": os.cpu_count(), "sessions": args.sessions, "prompts": args.prompts,
                                    "summary": summary, "runs": rows,
                                    **({"baseline": baseline} if baseline else {})}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
