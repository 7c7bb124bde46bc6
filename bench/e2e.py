"""`make bench-e2e`: the whole stack under 200 concurrent sessions.

Each session wakes with a prompt, gets its file and deck created, then runs rounds of a remote
notification, a file save, a deck edit and a prompt (the workload of tests/reliability/workload.py);
a quarter of the sessions are then suspended and woken again. Measured, on one machine and one Redis:

- delivery latency by kind, p50/p99: prompt -> completed answer in the transcript; notification
  (system_update) and artifact edits (file, deck) -> the injection appended to the session inbox, and
  -> the injection recorded in the transcript (for an idle agent after a per-ref merge window,
  services/runtime/inbox/idle.py);
- throughput: acknowledged operations and answered prompts per second over the load phase;
- wake latency: POST of the prompt that woke a dormant session -> its SessionLive on gamma:lifecycle
  (first wakes, and re-wakes of suspended sessions with a transcript to restore);
- memory per service (RSS, peak and end, psutil);
- losses and duplicates from the exactly-once audit of every transcript: both must be 0.

Writes bench/results/e2e.json and exits 1 when the audit finds a loss or duplicate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import inbox_trace  # noqa: E402
from bench.e2e_latency import delivery_latencies, prompt_kinds, summary, wake_latencies  # noqa: E402
from bench.profiler import record  # noqa: E402
from tests.reliability.workload import (  # noqa: E402
    FILE_REF,
    Audit,
    LoadClient,
    SessionRecord,
    audit_session,
    digest_backlog,
    digest_revisions,
    durable_undelivered,
    flush,
)
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, SERVICE_TOKEN, Stack, free_port, http_ok  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "e2e.json"


class MemorySampler(threading.Thread):
    """RSS of each service process once a second: the peak and the last value."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.peak: dict[str, int] = {}
        self.last: dict[str, int] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            for name, proc in self.stack.procs.items():
                try:
                    rss = psutil.Process(proc.pid).memory_info().rss
                except psutil.Error:
                    continue
                self.last[name] = rss
                self.peak[name] = max(rss, self.peak.get(name, 0))


def start_extra_runtimes(stack: Stack, n: int) -> None:
    """`n` more runtime workers beside the stack's one (as `make run` starts one per core)."""
    assert stack.log_dir is not None
    for i in range(n):
        name = f"runtime{i + 2}"
        port = free_port()
        log = open(stack.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the child
        stack.procs[name] = subprocess.Popen([sys.executable, "-m", "services.runtime"], stdout=log,
                                             stderr=subprocess.STDOUT, cwd=stack.src or ROOT,
                                             env=dict(stack.env, GAMMA_RUNTIME_PORT=str(port), GAMMA_INSTANCE=name))
        deadline = time.monotonic() + 60
        while not http_ok(f"http://127.0.0.1:{port}/healthz"):
            if time.monotonic() > deadline or stack.procs[name].poll() is not None:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.1)


def cpu_of(stack: Stack, redis_pid: int | None = None) -> dict[str, float]:
    """CPU seconds (user + system) of each service process so far, and of the redis-server."""
    out: dict[str, float] = {}
    pids = {name: proc.pid for name, proc in stack.procs.items()} | ({"redis": redis_pid} if redis_pid else {})
    for name, pid in pids.items():
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[name] = t.user + t.system
    own = psutil.Process().cpu_times()  # the load client itself: a saturated one delays what it measures
    out["bench_client"] = own.user + own.system
    if "runtime" in stack.procs:  # the runtime's event loop apart from its other threads (the I/O pool)
        try:
            threads = psutil.Process(stack.procs["runtime"].pid).threads()
        except psutil.Error:
            return out
        main = [t for t in threads if t.id == stack.procs["runtime"].pid]
        out["runtime_loop_thread"] = sum(t.user_time + t.system_time for t in main)
        out["runtime_other_threads"] = sum(t.user_time + t.system_time for t in threads if t not in main)
        out["runtime_other_threads_system"] = sum(t.system_time for t in threads if t not in main)
    return out


async def profile(stack: Stack, py_spy: str | None, out: Path, delay_s: float, seconds: int,
                  every_service: bool = False) -> None:
    """py-spy on the runtime for `seconds`, `delay_s` into the load phase (collapsed stacks); with
    --trace also on the proxy and on this load client (`<out stem>.{proxy,client}.folded`); with
    `every_service` on each service and the client (`<out stem>.<service>.folded`), `--nonblocking`
    so the sampled processes are not paused."""
    if py_spy is None:
        return
    await asyncio.sleep(delay_s)
    targets = {out: stack.procs["runtime"].pid}
    if every_service:
        targets.update({out.with_name(out.name.replace(".runtime.", f".{name}.")): proc.pid
                        for name, proc in stack.procs.items() if name != "runtime"})
        targets[out.with_name(out.name.replace(".runtime.", ".client."))] = os.getpid()
    elif stack.env_overrides.get("GAMMA_TRACE_INBOX") == "1":
        targets[out.with_name(out.name.replace(".runtime.", ".proxy."))] = stack.procs["proxy"].pid
        targets[out.with_name(out.name.replace(".runtime.", ".client."))] = os.getpid()
    procs = [await record(py_spy, pid, path, seconds, nonblocking=every_service) for path, pid in targets.items()]
    for proc in procs:
        await proc.wait()


async def loop_lag(lags: list[float], stop: asyncio.Event) -> None:
    """How late this load client's event loop runs a 10 ms timer: a late client delays its own
    requests after stamping them sent, which the latencies would blame on the stack."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(0.01)
        lags.append(max(loop.time() - t - 0.01, 0.0))


async def session_life(client: LoadClient, rounds: int, records: list[SessionRecord], start_delay: float) -> None:
    await asyncio.sleep(start_delay)
    rec = await client.create_session()
    records.append(rec)
    for n in range(rounds):
        await client.round(rec, n)


async def rewake(client: LoadClient, rec: SessionRecord) -> None:
    await client.suspend(rec)
    p = await client.prompt(rec, f"rewake:{rec.sid}")
    await client.wait_answer(rec, p)


def start_redis(args: argparse.Namespace, directory: Path) -> tuple[str, Callable[[], None], aioredis.Redis, int | None]:
    """(url without db, stop, audit client, redis-server pid): one redis-server with AOF, or with
    `--cluster` a local Redis Cluster of 3 primaries + 3 replicas (tests/support/redis_cluster.py; no pid)."""
    if args.cluster:
        from redis.asyncio.cluster import RedisCluster

        from tests.support.redis_cluster import LocalCluster

        cluster = LocalCluster(directory=directory).start()
        base = cluster.url.rsplit("/", 1)[0]
        return base, cluster.stop, cast(aioredis.Redis, RedisCluster.from_url(base, max_connections=200)), None
    url, redis_proc = start_redis_server(appendonly=True, data_dir=str(directory))
    # A blocking pool: 200 sessions auditing at once wait for a connection instead of failing.
    r = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(url + "/0", max_connections=50, timeout=600))
    return url, redis_proc.terminate, r, redis_proc.pid


@dataclass
class LoadPhase:
    """What the load phase leaves: the sessions it ran, its length, each process's CPU, the client's loop lag."""

    records: list[SessionRecord]
    load_s: float
    cpu_s: dict[str, float]
    lags: list[float]


@dataclass
class Settled:
    """After the re-wakes and the flush: what the audit and the latencies read from Redis and the disk."""

    rewake_s: float
    settled: list[bool]
    digest_current: dict[str, dict[str, int]]
    undelivered: dict[str, set[str]]
    seen: dict[str, dict[str, int]]
    wakes: dict[str, list[float]]
    delivery: dict[str, list[float]]


def make_stack(args: argparse.Namespace, url: str, data_dir: Path) -> Stack:
    # Production lease timing unless --test-lease: tests/support/stack.py shortens it (3 s, claims after
    # 1.5 s idle) for its failover tests; under this load the runtime's event loop stalls past that,
    # loses its own leases and resumes the sessions it already had, re-running their turns (docs/architecture.md "Streaming at scale").
    lease = {} if args.test_lease else {"GAMMA_LEASE_MS": "10000", "GAMMA_CLAIM_IDLE_MS": "5000"}
    return Stack(redis_url=url + "/0", data_dir=data_dir, src=args.src, env_overrides={
        "GAMMA_IDLE_S": "120", "GAMMA_REPLY_TIMEOUT_S": "20",
        # 200 sessions of one user in ~10 s: above the per-user create rate limit (60/min).
        "GAMMA_SESSION_CREATES_PER_MINUTE": "100000", **lease,
        **({"GAMMA_TRACE_INBOX": "1"} if args.trace else {})})


async def load_phase(args: argparse.Namespace, stack: Stack, client: LoadClient, redis_pid: int | None) -> LoadPhase:
    """Every session's life, the starts spread over the ramp; py-spy meanwhile when asked."""
    records: list[SessionRecord] = []
    t0, cpu0 = time.monotonic(), cpu_of(stack, redis_pid)
    lags: list[float] = []
    lag_stop = asyncio.Event()
    lag_task = asyncio.ensure_future(loop_lag(lags, lag_stop))
    spy = asyncio.ensure_future(profile(stack, args.py_spy, args.out.with_suffix(".runtime.folded"),
                                        args.py_spy_at, args.py_spy_s, args.py_spy_all))
    await asyncio.gather(*(session_life(client, args.rounds, records, i * args.ramp_s / args.sessions)
                           for i in range(args.sessions)))
    load_s = time.monotonic() - t0
    lag_stop.set()
    await lag_task
    cpu_load = {k: round(v - cpu0.get(k, 0.0), 1) for k, v in cpu_of(stack, redis_pid).items()}
    await spy
    return LoadPhase(records, load_s, cpu_load, lags)


async def settle(args: argparse.Namespace, client: LoadClient, r: aioredis.Redis, records: list[SessionRecord],
                 data_dir: Path) -> Settled:
    """A quarter of the sessions suspended and woken again, then every session flushed and read back."""
    t1 = time.monotonic()
    await asyncio.gather(*(rewake(client, rec) for rec in records[: args.sessions // 4]))
    rewake_s = time.monotonic() - t1
    settled = await asyncio.gather(*(flush(client, rec, r, args.flush_s) for rec in records))
    digest_current = {rec.sid: await digest_revisions(r, rec.sid) for rec in records}
    backlog = await digest_backlog(r)
    undelivered = {rec.sid: await durable_undelivered(r, rec.sid) | backlog.get(rec.sid, set()) for rec in records}
    seen = {rec.sid: await digest_revisions(r, rec.sid, "seen") for rec in records}
    return Settled(rewake_s, list(settled), digest_current, undelivered, seen, await wake_latencies(r, records),
                   await delivery_latencies(r, records, data_dir))


def audit_all(records: list[SessionRecord], data_dir: Path, s: Settled) -> Audit:
    audit = Audit()
    for rec in records:
        audit_session(rec, data_dir / "sessions" / rec.sid, audit, s.digest_current.get(rec.sid, {}),
                      s.undelivered.get(rec.sid), s.seen.get(rec.sid))
    return audit


def result_json(args: argparse.Namespace, client: LoadClient, load: LoadPhase, s: Settled, memory: dict[str, Any],
                audit: Audit, trace: dict[str, Any] | None) -> dict[str, Any]:
    records = load.records
    ops = sum(len(rec.prompts) + len(rec.notifications) + sum(len(v) for v in rec.edits.values()) for rec in records)
    prompt_lat = client.stats.latencies.get("prompt_answer", [])
    return {
        "bench": "e2e",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "config": {"sessions": args.sessions, "rounds": args.rounds, "ramp_s": args.ramp_s, "rewoken": args.sessions // 4,
                   "model": "scripted (offline, behind the real openai client)",
                   "redis": ("local Redis Cluster, 3 primaries + 3 replicas, no AOF, WAIT 1 after acknowledged writes"
                             if args.cluster else "local, AOF appendfsync always"),
                   "src": str(args.src or "this tree"), "lease": "test (3 s)" if args.test_lease else "production (10 s)",
                   "runtimes": args.runtimes},
        "throughput": {"load_phase_s": round(load.load_s, 1), "operations": ops, "ops_per_s": round(ops / load.load_s, 1),
                       "prompts_answered": len(prompt_lat), "prompts_per_s": round(len(prompt_lat) / load.load_s, 2),
                       "http_requests": client.stats.requests, "retries": client.stats.retries,
                       "rewake_phase_s": round(s.rewake_s, 1)},
        "cpu_s_load_phase": load.cpu_s,
        "client_loop_lag": summary(load.lags),
        "latency": {"prompt_to_answer": summary(prompt_lat), **prompt_kinds(records),
                    **{k: summary(client.stats.latencies.get(k, [])) for k in ("prompt_post", "prompt_post_woke")},
                    **{k: summary(v) for k, v in s.delivery.items()}},
        "wake": {k: summary(v) for k, v in s.wakes.items()},
        **({"inbox_trace": trace} if trace is not None else {}),
        "memory": memory,
        "settled_sessions": sum(s.settled),
        "audit": {**audit.summary(), "loss_examples": audit.losses[:10], "stuck_examples": audit.stuck[:10],
                  "misacknowledged_examples": audit.misacknowledged[:10],
                  "duplicate_examples": audit.duplicates[:10],
                  "corrupt_examples": audit.corrupt[:10]},
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="gamma-bench-e2e-"))
    (base / "redis").mkdir()
    url, stop_redis, r, redis_pid = start_redis(args, base / "redis")
    data_dir = base / "data"
    data_dir.mkdir()
    stack = make_stack(args, url, data_dir)
    sampler = MemorySampler(stack)
    client = LoadClient(stack.url("proxy"), stack.url("notifications"), API_TOKEN, SERVICE_TOKEN,
                        request_deadline_s=120, answer_timeout_s=180, poll_s=0.3, max_poll_s=args.poll_s)
    try:
        stack.start()
        start_extra_runtimes(stack, args.runtimes - 1)
        sampler.start()
        load = await load_phase(args, stack, client, redis_pid)
        settled = await settle(args, client, r, load.records, data_dir)
        memory = {"peak_mb": {k: round(v / 2**20, 1) for k, v in sampler.peak.items()},
                  "end_mb": {k: round(v / 2**20, 1) for k, v in sampler.last.items()}}
    finally:
        sampler.stopping.set()
        await client.aclose()
        await r.aclose()
        stack.stop()
        stop_redis()
    trace = inbox_trace.summarize(data_dir / "logs" / "runtime.log", data_dir / "logs" / "proxy.log",
                                  {rec.sid: rec.edit_answers.get(FILE_REF, []) for rec in load.records}) if args.trace else None
    return result_json(args, client, load, settled, memory, audit_all(load.records, data_dir, settled), trace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ramp-s", type=float, default=10.0, help="spread the session starts over this many seconds")
    parser.add_argument("--poll-s", type=float, default=2.0,
                        help="longest transcript poll interval per waiting session (latencies come from the transcript)")
    parser.add_argument("--flush-s", type=float, default=90.0)
    parser.add_argument("--out", type=Path, default=None, help="default bench/results/e2e.json (e2e.cluster.json)")
    parser.add_argument("--cluster", action="store_true", default=os.environ.get("GAMMA_BENCH_CLUSTER") == "1",
                        help="run on a local Redis Cluster (3 primaries + 3 replicas) instead of one Redis")
    parser.add_argument("--src", type=Path, default=None, help="run the services from this source tree (a baseline)")
    parser.add_argument("--runtimes", type=int, default=1, help="runtime worker processes")
    parser.add_argument("--py-spy", default=None, help="py-spy binary: profile the runtime 20 s of the load phase")
    parser.add_argument("--py-spy-at", type=float, default=15.0, help="seconds into the load phase")
    parser.add_argument("--py-spy-s", type=int, default=20, help="seconds profiled")
    parser.add_argument("--py-spy-all", action="store_true", help="profile every service and the client")
    parser.add_argument("--test-lease", action="store_true", help="the test stack's 3 s lease")
    parser.add_argument("--trace", action="store_true",
                        help="the runtime logs each inbox entry's hops; the result splits them (bench/inbox_trace.py)")
    args = parser.parse_args()
    args.out = args.out or (RESULTS.with_name("e2e.cluster.json") if args.cluster else RESULTS)
    result = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("throughput", "latency", "wake", "memory")}, indent=2))
    a = result["audit"]
    print(f"audit: {a['sessions']} sessions, {a['entries_checked']} entries, {a['prompts_checked']} prompts, "
          f"{a['notifications_checked']} notifications, {a['artifact_changes_checked']} artifact edits; "
          f"losses {a['losses']}, stuck undelivered {a['stuck_undelivered']}, misacknowledged {a['misacknowledged']}, "
          f"duplicates {a['duplicates']}, "
          f"corrupt {a['corrupt']}")
    for key in ("loss_examples", "stuck_examples", "misacknowledged_examples", "duplicate_examples", "corrupt_examples"):
        for line in a[key]:
            print(" ", key.split("_")[0], line)
    clean = not (a["losses"] or a["stuck_undelivered"] or a["misacknowledged"] or a["stale_writes"] or a["duplicates"]
                 or a["corrupt"])
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
