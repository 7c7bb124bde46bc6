"""`make bench-faults-disk`: what a slow session disk costs (the disk half of bench-faults; the network
half is bench/faults_net.py).

The five real services run three times in one run, each on a fresh session disk, one after another:
- `normal`: a directory on the machine's own disk;
- `fuse 0ms`: the FUSE passthrough of tests/support/slowfs.py with no latency (its own cost alone);
- `fuse 20ms`: the same with every fsync 20 ms and every metadata operation 5 ms (a network
  filesystem's figures: README "Reliability").
On each, S sessions prompt one after another (each prompt once the previous one is answered), S at a
time; prompt -> answer is `POST /messages` -> the run's `agent_end` event on `gamma:{sid}:events`.
The first prompt of each session (its wake) is reported apart. Meanwhile the proxy's /healthz is
asked every 100 ms: the target is every answer within 50 ms (nothing holds the event loop on disk
I/O). Prints a table and writes bench/results/faults_disk.json. Not a timed test.
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
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.redis import keys  # noqa: E402
from tests.support import slowfs  # noqa: E402
from tests.support.healthz import HealthzMonitor  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, Stack  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "faults_disk.json"
DISKS = (("normal", None), ("fuse 0ms", (0, 0)), ("fuse 20ms", (20, 5)))
HEALTHZ_TARGET_MS = 50.0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * q))], 1) if xs else 0.0


async def answered(r: aioredis.Redis, sid: str, after: str, timeout_s: float = 120) -> str:
    """The id of the next `agent_end` event after `after`."""
    deadline = time.monotonic() + timeout_s
    last = after
    while time.monotonic() < deadline:
        got = await r.xread({keys.events(sid): last}, block=1000, count=100)
        for _, items in got or []:
            for entry_id, fields in items:
                last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                if json.loads(fields[b"data"]).get("type") == "agent_end":
                    return last
    raise TimeoutError(f"{sid}: no answer within {timeout_s} s")


async def session(http: httpx.AsyncClient, r: aioredis.Redis, prompts: int, wakes: list[float],
                  answers: list[float]) -> None:
    sid = (await http.post("/sessions", json={})).json()["id"]
    last = "0"
    for i in range(prompts):
        began = time.perf_counter()
        resp = await http.post(f"/sessions/{sid}/messages", json={"message": f"prompt {i}: hello"})
        resp.raise_for_status()
        last = await answered(r, sid, last)
        (wakes if i == 0 else answers).append((time.perf_counter() - began) * 1000)


async def drive(stack: Stack, redis_url: str, sessions: int, prompts: int) -> dict[str, Any]:
    r = aioredis.from_url(redis_url)
    wakes: list[float] = []
    answers: list[float] = []
    monitor = HealthzMonitor(stack.url() + "/healthz", interval_s=0.1).start()
    # The runtime's loop for comparison: it writes the transcript, UI state and snapshots under its
    # disk fence (the write itself on the loop, the fsync of an append in the I/O pool).
    runtime = HealthzMonitor(stack.url("runtime") + "/healthz", interval_s=0.1).start()
    began = time.perf_counter()
    try:
        async with httpx.AsyncClient(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"},
                                     timeout=120) as http:
            await asyncio.gather(*(session(http, r, prompts, wakes, answers) for _ in range(sessions)))
    finally:
        monitor.stop()
        runtime.stop()
        await r.aclose()
    health = monitor.summary()
    return {"wall_s": round(time.perf_counter() - began, 1), "prompts": len(answers), "wakes": len(wakes),
            "answer_p50_ms": pct(answers, 0.5), "answer_p99_ms": pct(answers, 0.99),
            "wake_answer_p50_ms": pct(wakes, 0.5), "wake_answer_p99_ms": pct(wakes, 0.99),
            "healthz": health, "healthz_within_target": health["max_ms"] <= HEALTHZ_TARGET_MS,
            "healthz_failures": len(monitor.failures), "runtime_healthz": runtime.summary()}


def run_on(name: str, latency: tuple[int, int] | None, work: Path, redis_url: str, sessions: int,
           prompts: int) -> dict[str, Any]:
    fs = None
    data = work / name.replace(" ", "_") / "data"
    if latency is not None:
        fs = slowfs.SlowFs(work / f"{name.replace(' ', '_')}-src", work / name.replace(" ", "_"), work / f"{name}.json")
        fs.start(fsync_ms=latency[0], meta_ms=latency[1])
        data = fs.mountpoint / "data"
    stack = Stack(redis_url=redis_url, data_dir=data, log_dir=work / f"logs-{name.replace(' ', '_')}",
                  env_overrides={"GAMMA_IDLE_S": "300"})
    try:
        stack.start()
        return asyncio.run(drive(stack, redis_url, sessions, prompts))
    finally:
        stack.stop()
        if fs is not None:
            fs.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=6, help="per session; the first one wakes it")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    why = slowfs.available()
    if why is not None:
        sys.exit(f"bench-faults-disk needs FUSE: {why}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gamma-bench-faults-disk-") as tmp:
        work = Path(tmp)
        url, server = start_redis_server(data_dir=str(work))
        try:
            for db, (name, latency) in enumerate(DISKS, start=1):
                results[name] = run_on(name, latency, work, f"{url}/{db}", args.sessions, args.prompts)
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"{'disk':<11} {'answer p50':>11} {'answer p99':>11} {'wake p50':>9} {'wake p99':>9} "
          f"{'proxy /healthz p99':>19} {'max':>6} {'>50ms':>6} {'runtime /healthz p99':>21} {'max':>6}")
    for name, row in results.items():
        h, rt = row["healthz"], row["runtime_healthz"]
        print(f"{name:<11} {row['answer_p50_ms']:>11} {row['answer_p99_ms']:>11} {row['wake_answer_p50_ms']:>9} "
              f"{row['wake_answer_p99_ms']:>9} {h['p99_ms']:>19} {h['max_ms']:>6} {h['over_50ms']:>6} "
              f"{rt['p99_ms']:>21} {rt['max_ms']:>6}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"sessions": args.sessions, "prompts_per_session": args.prompts,
                                    "machine": {"arch": platform.machine(), "cpus": os.cpu_count(),
                                                "python": platform.python_version()},
                                    "healthz_target_ms": HEALTHZ_TARGET_MS, "disks": results}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
