"""`make bench-stream`: streaming at scale, from the model's chunk to the client's screen (docs/architecture.md "Streaming at scale").

For each load (200, 500, 1,000 concurrent sessions by default), on one runtime worker and one proxy:
every session is woken by a first prompt, then gets an SSE reader (asyncio httpx, many per child
process) and a prompt whose answer the scripted model streams like a fast GPT model (400 ms to the
first token, 80 tokens/s, one token per chunk): 400 text tokens then one tool call (message_user,
its arguments streamed). Every token carries its emit time (GAMMA_SCRIPTED_STAMP), so each reader
records receive time minus emit time on the same clock: the latency the harness adds.

Measured per load: added latency p50/p99/max, tokens/s delivered, SSE events per token, Redis commands
per token (INFO commandstats over the streaming phase, all clients), the time from each streaming
prompt's POST to its first token at the client (`first_token`), runtime and proxy CPU ms per 1,000
tokens (psutil), proxy RSS per SSE client, the load average; and a baseline: the same tokens on the
same schedule relayed by one bare XADD -> XREAD hop each. Bounded: one prompt per session per load.
Writes bench/results/stream.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.model_server import start_model_server  # noqa: E402
from bench.profiler import record  # noqa: E402
from bench.stream_clients import bare_consumer, bare_producer, sse_readers  # noqa: E402
from bench.stream_steady import sample_cpu, steady_window  # noqa: E402
from shared.redis import keys  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, Stack  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "stream.json"
TOOL = {"name": "message_user", "arguments": {"message": "Done: the answer is above.", "blockOnUser": True}}


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))] * 1000, 1)


async def redis_cpu_s(r: aioredis.Redis) -> float:
    info = await r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def commands(r: aioredis.Redis) -> dict[str, int]:
    stats = await r.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def agent_ends(r: aioredis.Redis, sid: str) -> int:
    return sum(1 for _, f in await r.xrange(keys.events(sid)) if b'"agent_end"' in f.get(b"data", b""))


async def until_answered(r: aioredis.Redis, sids: list[str], n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(sids)
    while pending and time.monotonic() < deadline:
        counts = await asyncio.gather(*(agent_ends(r, s) for s in pending))
        pending = [s for s, c in zip(pending, counts, strict=True) if c < n]
        if pending:
            await asyncio.sleep(1.0)
    if pending:
        raise RuntimeError(f"{len(pending)} sessions not answered in {timeout_s} s")


async def create_sessions(http: httpx.AsyncClient, n: int, at_once: int = 50) -> list[str]:
    """`n` new sessions, `at_once` creations in flight."""
    sem = asyncio.Semaphore(at_once)

    async def create() -> str:
        async with sem:
            resp = await http.post("/sessions", json={})
            resp.raise_for_status()
            return str(resp.json()["id"])
    return list(await asyncio.gather(*(create() for _ in range(n))))


async def post_all(http: httpx.AsyncClient, sids: list[str], body: dict[str, Any], ramp_s: float,
                   posted: dict[str, float] | None = None) -> None:
    """`posted`: each session's prompt's send time (time.time() as its accepted POST began)."""
    async def one(i: int, sid: str) -> None:
        await asyncio.sleep(ramp_s * i / len(sids))
        why = ""
        for _ in range(50):
            if posted is not None:
                posted[sid] = time.time()
            try:
                resp = await http.post(f"/sessions/{sid}/messages", json=body)
            except httpx.TransportError as exc:  # a kept-alive connection the proxy closed meanwhile
                why = repr(exc)
                continue
            if resp.status_code == 202:
                return
            why = f"{resp.status_code} {resp.text[:200]}"
            await asyncio.sleep(0.2)  # 409 waking / 429: try again
        raise RuntimeError(f"prompt refused: {why}")
    await asyncio.gather(*(one(i, s) for i, s in enumerate(sids)))


def receive(proc: Any, conn: Any, timeout_s: float) -> Any:
    """What a reader process sends, or an error when it dies or says nothing for `timeout_s` (a bare
    `recv` waited forever for a reader that had crashed)."""
    deadline = time.monotonic() + timeout_s
    while not conn.poll(1.0):
        if not proc.is_alive():
            raise RuntimeError(f"SSE reader process exited with {proc.exitcode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"SSE reader process silent for {timeout_s} s")
    return conn.recv()


def start_readers(proxy_url: str, sids: list[str], procs: int, timeout_s: float) -> list[tuple[Any, Any]]:
    ctx = mp.get_context("spawn")
    out = []
    for k in range(procs):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=sse_readers, args=(proxy_url, API_TOKEN, sids[k::procs], child, timeout_s), daemon=True)
        p.start()
        out.append((p, parent))
    return out


async def stack_load(args: argparse.Namespace, n: int, src: Path | None, label: str) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="gamma-bench-stream-"))
    url, redis_proc = start_redis_server()
    (base / "data").mkdir()
    model_env = {"GAMMA_SCRIPTED_PROFILE": "fast_gpt", "GAMMA_SCRIPTED_STAMP": "true",
                 "GAMMA_SCRIPTED_TOKENS_PER_S": str(args.rate)}
    server, server_env = start_model_server(args.api or "responses", model_env) if args.model_server else (None, {})
    stack = Stack(redis_url=url + "/0", data_dir=base / "data", env_overrides={
        # Production lease timing (tests/support/stack.py shortens it for failover tests; a saturated
        # worker then loses leases mid-run and sessions are resumed elsewhere: noise, not streaming).
        "GAMMA_LEASE_MS": "10000", "GAMMA_CLAIM_IDLE_MS": "5000", "GAMMA_IDLE_S": "600", "GAMMA_SESSION_CREATES_PER_MINUTE": "100000", "GAMMA_MAX_SESSIONS_PER_USER": "100000",
        "GAMMA_SSE_MAX_STREAMS_PER_USER": str(n + 10), "GAMMA_SSE_QUEUE_SIZE": "5000",
        **model_env, "GAMMA_DELTA_COALESCE_MS": str(args.coalesce_ms), "GAMMA_MODEL_HTTP": args.model_http,
        **({"GAMMA_MODEL_API": args.api} if args.api else {}), **server_env,
        **dict(kv.split("=", 1) for kv in args.env)}, src=src,
        service_env={"runtime": fsync_counting(src, base)})
    r = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(url + "/0", max_connections=40, timeout=60))
    http = httpx.AsyncClient(base_url=stack.url("proxy"), headers={"Authorization": f"Bearer {API_TOKEN}"},
                             timeout=60, limits=httpx.Limits(max_connections=100))
    try:
        stack.start()
        sids = await create_sessions(http, n)
        await post_all(http, sids, {"message": "hi"}, ramp_s=n / 100)  # wake every session first
        await until_answered(r, sids, 1, 120 + n * 0.3)
        proxy, runtime = stack.procs["proxy"].pid, stack.procs["runtime"].pid
        rss_before = psutil.Process(proxy).memory_info().rss
        readers = start_readers(stack.url("proxy"), sids, args.client_procs, args.timeout_s)
        for proc, conn in readers:
            assert receive(proc, conn, 300) == "open"
        rss_open = psutil.Process(proxy).memory_info().rss
        disk0 = runtime_disk(runtime, base)
        cpu_model0 = cpu_s(server.pid) if server is not None else 0.0
        cpu_redis0 = await redis_cpu_s(r)
        cmd0, cpu_rt0, cpu_px0, t0 = await commands(r), cpu_s(runtime), cpu_s(proxy), time.monotonic()
        content = "@ts@" * args.tokens
        script = "script:" + json.dumps([{"content": content, "tool_calls": [TOOL]}])
        spies: list[asyncio.subprocess.Process] = []

        async def spy() -> None:  # the runtime, and the proxy (`.proxy.folded`), from --py-spy-at on
            await asyncio.sleep(args.py_spy_at)
            for pid, suffix in ((runtime, ""), (proxy, ".proxy")):
                out = Path("/tmp") / f"stream-{label}-{n}{suffix}.folded"  # profiles stay out of the repo
                spies.append(await record(args.py_spy, pid, out, args.py_spy_s, args.py_spy_rate, perf=args.perf))
        spying = asyncio.ensure_future(spy()) if args.py_spy else None
        pids = {"runtime": runtime, "proxy": proxy, **({"model_server": server.pid} if server is not None else {}),
                **{f"reader{k}": p.pid for k, (p, _) in enumerate(readers)}}
        samples: list[tuple[float, dict[str, float]]] = []
        sampling = asyncio.ensure_future(sample_cpu(pids, samples))
        posted: dict[str, float] = {}
        await post_all(http, sids, {"message": script}, ramp_s=args.ramp_s, posted=posted)
        if spying is not None:
            await spying
        # In threads: the CPU sampler keeps running on this loop meanwhile.
        results = await asyncio.gather(*(asyncio.to_thread(receive, proc, conn, args.timeout_s + 120)
                                         for proc, conn in readers))
        sampling.cancel()
        for spy in spies:
            await spy.wait()
        elapsed = time.monotonic() - t0
        rss_peak = psutil.Process(proxy).memory_info().rss
        cmd1, cpu_rt1, cpu_px1 = await commands(r), cpu_s(runtime), cpu_s(proxy)
        disk = {k: v - disk0[k] for k, v in runtime_disk(runtime, base).items()}
        disk["data_dir_kb"] = sum(f.stat().st_size for f in (base / "data").rglob("*") if f.is_file()) / 1024
        cpu_model = cpu_s(server.pid) - cpu_model0 if server is not None else None
        cpu_redis = await redis_cpu_s(r) - cpu_redis0
        for p, _ in readers:
            p.join(10)
    finally:
        await http.aclose()
        await r.aclose()
        stack.stop()
        if server is not None:
            server.terminate()
            server.wait(10)
        redis_proc.terminate()
    lat = [x for res in results for x in res["lat"]]
    tokens = len(lat)
    hops = [tuple(res["hops"][i : i + 4]) for res in results for i in range(0, len(res.get("hops", ())), 4)]
    return {"lat": lat, "hops": hops, "tokens": tokens, "events": sum(res["events"] for res in results),
            "restarts": sum(res["restarts"] for res in results),
            "first_token": first_token(posted, [res.get("first", {}) for res in results]),
            "done": sum(res["done"] for res in results), "errors": sum(res["errors"] for res in results),
            "elapsed_s": elapsed, "cmds": sum(cmd1.values()) - sum(cmd0.values()) - 1,
            "by_command": {k: v - cmd0.get(k, 0) for k, v in sorted(cmd1.items(), key=lambda kv: -kv[1])
                           if v - cmd0.get(k, 0) > 0}, "cpu_runtime_s": cpu_rt1 - cpu_rt0,
            "cpu_proxy_s": cpu_px1 - cpu_px0, "cpu_model_server_s": cpu_model,
            "cpu_redis_s": cpu_redis, "cpu_readers_s": sum(res.get("cpu_s", 0.0) for res in results), "rss_before": rss_before, "rss_open": rss_open, "rss_peak": rss_peak,
            "disk": disk,
            "steady": steady_window(samples, hops, [x for res in results for x in res.get("spans", ())])}


TTFT_S = 0.4  # the scripted profile's time to first token (fast_gpt), from the model server's receipt


def first_token(posted: dict[str, float], firsts: list[dict[str, tuple[float, float]]]) -> dict[str, Any]:
    """Per session, from its streaming prompt's POST: the client's first token (`ttft`), and the model
    server's receipt of the request (`to_model`: the first token's due time less the profile's time to
    first token; the harness's part of the wait: the proxy, the inbox, the turn's start)."""
    ttft: list[float] = []
    to_model: list[float] = []
    for per_reader in firsts:
        for sid, (due, now) in per_reader.items():
            if sid in posted:
                ttft.append(now - posted[sid])
                to_model.append(due - TTFT_S - posted[sid])
    return {name: {"p50_ms": pct(v, 0.5), "p90_ms": pct(v, 0.9), "p99_ms": pct(v, 0.99), "max_ms": pct(v, 1.0),
                   "mean_ms": round(sum(v) / len(v) * 1000, 1) if v else None, "sessions": len(v)}
            for name, v in (("ttft", ttft), ("to_model", to_model))}


def fsync_counting(src: Path | None, base: Path) -> dict[str, str]:
    """The runtime's environment additions that count its fsyncs (bench/probe_fsync)."""
    (base / "fsyncs").mkdir(exist_ok=True)
    path = os.pathsep.join((str(ROOT / "bench" / "probe_fsync"), str(src or ROOT)))
    return {"PYTHONPATH": path, "GAMMA_FSYNC_COUNT_DIR": str(base / "fsyncs")}


def runtime_disk(pid: int, base: Path) -> dict[str, float]:
    io = psutil.Process(pid).io_counters()
    try:
        fsyncs = float((base / "fsyncs" / str(pid)).read_text().strip() or 0)
    except FileNotFoundError:
        fsyncs = 0.0
    return {"write_kb": io.write_bytes / 1024, "write_call_kb": io.write_chars / 1024, "fsyncs": fsyncs}


def baseline(args: argparse.Namespace, n: int) -> list[float]:
    url, redis_proc = start_redis_server()
    ctx = mp.get_context("spawn")
    streams = [f"bench:bare:{i}" for i in range(n)]
    parent, child = ctx.Pipe()
    try:
        consumer = ctx.Process(target=bare_consumer, args=(url, streams, args.tokens, child, args.timeout_s), daemon=True)
        consumer.start()
        time.sleep(1.0)
        producer = ctx.Process(target=bare_producer, args=(url, streams, args.tokens, 0.4, args.rate, args.ramp_s),
                               daemon=True)
        producer.start()
        lat: list[float] = parent.recv() if parent.poll(args.timeout_s + 60) else []
        producer.join(30)
        consumer.join(10)
    finally:
        redis_proc.terminate()
    return lat


HOPS = ("model_late", "model_to_xadd", "xadd_to_client")


def hop_split(hops: list[tuple[float, float, float, float]]) -> dict[str, Any]:
    """Each token's added latency split at the hops stamped on the way (bench/stream_clients.py):
    the model server's loop late (sent - due), model -> runtime read, tick and XADD (the entry id's
    ms), XADD -> proxy XREAD -> SSE -> client. p50/p99 per hop, and the mean of each hop over the
    tokens in the total's worst 1% (where the tail comes from)."""
    if not hops:
        return {}
    parts = [(sent - due, xadd - sent, now - xadd, now - due) for due, sent, xadd, now in hops]
    out: dict[str, Any] = {h: {"p50_ms": pct([p[i] for p in parts], 0.5), "p99_ms": pct([p[i] for p in parts], 0.99)}
                           for i, h in enumerate(HOPS)}
    # From the time the model let the token go: with the model out of process, its own loop's lateness
    # is the provider's, not the harness's (in process it is the runtime's loop: `added_*` counts it).
    from_sent = [p[1] + p[2] for p in parts]
    out["from_sent"] = {"p50_ms": pct(from_sent, 0.5), "p99_ms": pct(from_sent, 0.99), "max_ms": pct(from_sent, 1.0)}
    cut = sorted(p[3] for p in parts)[int(0.99 * (len(parts) - 1))]
    tail = [p for p in parts if p[3] >= cut]
    out["worst_1pct_mean_ms"] = {h: round(sum(p[i] for p in tail) / len(tail) * 1000, 1) for i, h in enumerate(HOPS)}
    # When the worst 1% fell due (s after the first token, 0.5 s buckets): a few crowded buckets are
    # stalls that hit every session at once (a blocked loop, a descheduled process), spread is queueing.
    t0 = min(h[0] for h in hops)
    when = Counter(round((due - t0) * 2) / 2 for (due, _, _, now), p in zip(hops, parts, strict=True) if p[3] >= cut)
    out["worst_1pct_due_at_s"] = dict(sorted(when.items()))
    return out


def summarize(n: int, s: dict[str, Any], bare: list[float], load: list[float]) -> dict[str, Any]:
    tokens = max(s["tokens"], 1)
    return {
        "sessions": n, "tokens_expected": n * 0, "tokens_delivered": s["tokens"],
        "sessions_completed": s["done"], "reader_errors": s["errors"], "model_restarts_seen": s["restarts"],
        "added_p50_ms": pct(s["lat"], 0.5), "added_p99_ms": pct(s["lat"], 0.99), "added_max_ms": pct(s["lat"], 1.0),
        "baseline_p50_ms": pct(bare, 0.5), "baseline_p99_ms": pct(bare, 0.99), "baseline_max_ms": pct(bare, 1.0),
        "baseline_tokens": len(bare),
        "chunks_per_s": round(s["tokens"] / s["elapsed_s"], 1), "phase_s": round(s["elapsed_s"], 1),
        "sse_events_per_chunk": round(s["events"] / tokens, 3),
        "redis_cmds_per_chunk": round(s["cmds"] / tokens, 3),
        "runtime_cpu_ms_per_1k_chunks": round(s["cpu_runtime_s"] * 1e6 / tokens, 1),
        "proxy_cpu_ms_per_1k_chunks": round(s["cpu_proxy_s"] * 1e6 / tokens, 1),
        "model_server_cpu_ms_per_1k_chunks": (None if s["cpu_model_server_s"] is None
                                              else round(s["cpu_model_server_s"] * 1e6 / tokens, 1)),
        "redis_cpu_ms_per_1k_chunks": round(s["cpu_redis_s"] * 1e6 / tokens, 1),
        "sse_readers_cpu_ms_per_1k_chunks": round(s["cpu_readers_s"] * 1e6 / tokens, 1),
        "steady": s.get("steady"),
        # The runtime's disk work in the phase, per prompt (n prompts): bytes written to the block
        # device (the page cache's writeback of what it wrote), bytes handed to write(), fsyncs; and
        # data_dir_kb: the session disk's size at the end (two turns per session, the wake's and this).
        "runtime_disk_per_prompt": {k: round(v / n, 1) for k, v in s.get("disk", {}).items()},
        "proxy_rss_per_client_kb": round((max(s["rss_open"], s["rss_peak"]) - s["rss_before"]) / 1024 / n, 1),
        "proxy_rss_mb": {"before_clients": round(s["rss_before"] / 2**20, 1),
                         "clients_open": round(s["rss_open"] / 2**20, 1), "end": round(s["rss_peak"] / 2**20, 1)},
        "load_average": load, "hops": hop_split(s.get("hops", [])), "first_token": s.get("first_token"),
        "redis_cmds_per_chunk_by_command": {k: round(v / tokens, 3) for k, v in list(s["by_command"].items())[:8]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="200,500,1000")
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--rate", type=float, default=80.0, help="tokens per second per session")
    parser.add_argument("--ramp-s", type=float, default=2.0, help="spread the streaming prompts over this")
    parser.add_argument("--coalesce-ms", type=float, default=30.0, help="GAMMA_DELTA_COALESCE_MS (its default)")
    parser.add_argument("--model-server", action="store_true",
                        help="the scripted model as its own process (scripted/server.py), "
                             "reached over HTTP as a provider is; default: inside the runtime (ScriptedTransport)")
    parser.add_argument("--model-http", choices=["aiohttp", "httpx"], default="aiohttp",
                        help="GAMMA_MODEL_HTTP: the openai client's backend (with --model-server)")
    parser.add_argument("--api", choices=["responses", "chat"], default=None)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=180.0)
    parser.add_argument("--label", default="")
    parser.add_argument("--before-label", default="before", help="names the --before-src run's py-spy file")
    parser.add_argument("--py-spy", default=None, help="py-spy binary: profile the runtime and the proxy while streaming")
    parser.add_argument("--py-spy-s", type=int, default=6, help="how long")
    parser.add_argument("--perf", action="store_true", help="with --py-spy: Linux perf instead (native frames)")
    parser.add_argument("--py-spy-rate", type=int, default=50, help="samples per second")
    parser.add_argument("--py-spy-at", type=float, default=0.0, help="from this long after the first streaming prompt")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment setting of the stack (both runs of a pair; a tree without it ignores it)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--before-src", type=Path, default=None,
                        help="a source tree (e.g. `git archive main`) run at each load just before this one")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for n in (int(x) for x in args.loads.split(",")):
        before: dict[str, Any] | None = None
        if args.before_src is not None:  # the baseline tree first, then this one, minutes apart
            before = asyncio.run(stack_load(args, n, args.before_src, args.before_label))
            before["load"] = [round(x, 2) for x in os.getloadavg()]
        s = asyncio.run(stack_load(args, n, None, args.label or "after"))
        load = [round(x, 2) for x in os.getloadavg()]
        bare = baseline(args, n)
        row = summarize(n, s, bare, load)
        row["tokens_expected"] = n * args.tokens
        if before is not None:
            row["before"] = {k: v for k, v in summarize(n, before, bare, before["load"]).items()
                             if not k.startswith("baseline")}
        rows.append(row)
        print(json.dumps(row), flush=True)
        write(args, rows)  # after each load: a long run that is stopped keeps what it measured


def write(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    result = {"bench": "stream", "label": args.label, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpus": os.cpu_count()},
              "config": {"tokens": args.tokens, "rate": args.rate, "ttft_ms": 400, "ramp_s": args.ramp_s,
                         "coalesce_ms": args.coalesce_ms, "api": args.api or "responses",
                         "client_procs": args.client_procs, "before_src": str(args.before_src or ""),
                         "model_server": args.model_server, "model_http": args.model_http, "env": args.env},
              "loads": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
