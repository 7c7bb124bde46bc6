"""`make bench-wake`: wakes under a busy runtime (docs/capacity.md "Per wake").

One runtime worker, one proxy, the scripted model inside the runtime (as bench-stream's default). Every
session is woken once by a first prompt (so each has a transcript to restore); `--dormant` of them are
suspended again. Then, measured:

- **under load**: `--streaming` live sessions stream a fast model's answer (bench-stream's profile:
  80 tokens/s, one token per chunk) while the dormant ones are woken by a prompt, `--wake-rate` per
  second (0: all at once). Per wake: the runtime's wake entry (its read from `gamma:runtime:wake`) ->
  SessionLive, from the `session_live` log line's `WakeClock` fields (services/runtime/hosting/wake_timing.py,
  with the split by step); the prompt's POST -> SessionLive on `gamma:lifecycle`; the POST -> the
  session's first event that is not a status (the answer starting).
- **quiet**, after the streams ended: `--quiet` more dormant sessions woken by a prompt, and as many
  prompts to live sessions; the runtime CPU (psutil), Redis commands (INFO commandstats, all clients)
  and the runtime's fsyncs (bench/probe_fsync) of each phase per prompt. A wake's own cost is the
  difference: a waking prompt minus a live one.

Writes bench/results/wake_load.json (`--out`); `--before-src TREE` runs that tree first, minutes apart,
into `<out>.before.json`. The read -> SessionLive split needs the `WakeClock` log fields in that tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.stream import (  # noqa: E402
    TOOL,
    agent_ends,
    commands,
    cpu_s,
    create_sessions,
    fsync_counting,
    post_all,
    runtime_disk,
)
from shared.redis import keys  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, Stack  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "wake_load.json"
LIVE_RE = re.compile(rb'"type":\s*"session_live".*?"session_id":\s*"([^"]+)"')  # as bench/e2e.py reads it
SID_RE = re.compile(rb'"session_id":\s*"([^"]+)"')
IDLE_S = 5.0
STEPS = ("lease", "claim", "read", "build", "restore", "live")  # entry -> SessionLive (session.py `open`, `go_live`)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))], 1)


def dist(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50_ms": pct(values, 0.5), "p90_ms": pct(values, 0.9), "p99_ms": pct(values, 0.99),
            "max_ms": pct(values, 1.0)}


async def until_more(r: aioredis.Redis, sids: list[str], before: dict[str, int], timeout_s: float) -> None:
    """Until each session has one more `agent_end` than in `before`."""
    deadline, pending = time.monotonic() + timeout_s, list(sids)
    while pending:
        counts = await asyncio.gather(*(agent_ends(r, s) for s in pending))
        pending = [s for s, c in zip(pending, counts, strict=True) if c <= before[s]]
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} sessions not answered in {timeout_s} s")
        await asyncio.sleep(0.5 if pending else 0)


async def ends(r: aioredis.Redis, sids: list[str]) -> dict[str, int]:
    return dict(zip(sids, await asyncio.gather(*(agent_ends(r, s) for s in sids)), strict=True))


async def wake_at_rate(http: httpx.AsyncClient, sids: list[str], rate: float) -> dict[str, float]:
    """POST a prompt to each dormant session, `rate` per second (0: at once): sid -> send time."""
    sent: dict[str, float] = {}

    async def one(i: int, sid: str) -> None:
        await asyncio.sleep(i / rate if rate > 0 else 0)
        sent[sid] = time.time()
        resp = await http.post(f"/sessions/{sid}/messages", json={"message": "hi"})
        if resp.status_code != 202 or not resp.json().get("woke"):
            raise RuntimeError(f"wake prompt: {resp.status_code} {resp.text[:200]}")
    await asyncio.gather(*(one(i, s) for i, s in enumerate(sids)))
    return sent


async def lifecycle_lives(r: aioredis.Redis) -> dict[str, float]:
    """sid -> the time of its last SessionLive on gamma:lifecycle (the entry id's ms)."""
    out: dict[str, float] = {}
    for entry_id, fields in await r.xrange(keys.LIFECYCLE):
        m = LIVE_RE.search(b" ".join(v for v in fields.values() if isinstance(v, bytes)))
        if m:
            out[m.group(1).decode()] = int(entry_id.decode().split("-")[0]) / 1000
    return out


async def wake_entries(r: aioredis.Redis) -> dict[str, float]:
    """sid -> the time of its last Wake on gamma:runtime:wake (the entry id's ms: the proxy's XADD)."""
    out: dict[str, float] = {}
    for entry_id, fields in await r.xrange(keys.WAKE):
        m = SID_RE.search(b" ".join(v for v in fields.values() if isinstance(v, bytes)))
        if m:
            out[m.group(1).decode()] = int(entry_id.decode().split("-")[0]) / 1000
    return out


async def first_event(r: aioredis.Redis, sid: str, after: float) -> float | None:
    """The time of the session's first event after `after` that is not a status event."""
    start = f"{int(after * 1000)}-0"
    for entry_id, fields in await r.xrange(keys.events(sid), min=start, count=50):
        if b'"status"' not in fields.get(b"data", b"")[:60]:
            return int(entry_id.decode().split("-")[0]) / 1000
    return None


def wake_log(log: str, sids: set[str]) -> dict[str, dict[str, float]]:
    """sid -> the WakeClock fields of its last `session_live` log line, with those of the
    `session_reading` line that follows it (the status and reader steps, after SessionLive)."""
    out: dict[str, dict[str, float]] = {}
    for line in log.splitlines():
        if '"session_live"' not in line and '"session_reading"' not in line:
            continue
        try:
            rec = json.loads(line[line.index("{"):])
        except ValueError:
            continue
        if rec.get("session_id") in sids and "wake_ms" in rec:
            fields = {k: float(v) for k, v in rec.items() if k.endswith("_ms")}
            if rec.get("event") == "session_reading":
                out.setdefault(rec["session_id"], {}).update(fields)
            else:
                out[rec["session_id"]] = fields
    return out


async def costs(r: aioredis.Redis, runtime: int, base: Path) -> dict[str, float]:
    cmds = await commands(r)
    return {"cpu_s": cpu_s(runtime), "cmds": float(sum(cmds.values())), **runtime_disk(runtime, base)}


def per_unit(c0: dict[str, float], c1: dict[str, float], n: int) -> dict[str, float]:
    return {"runtime_cpu_ms": round((c1["cpu_s"] - c0["cpu_s"]) * 1000 / n, 2),
            "redis_cmds": round((c1["cmds"] - c0["cmds"] - 1) / n, 1),  # minus the INFO of the reading
            "fsyncs": round((c1["fsyncs"] - c0["fsyncs"]) / n, 2),
            "write_call_kb": round((c1["write_call_kb"] - c0["write_call_kb"]) / n, 1)}


async def quiet_costs(r: aioredis.Redis, http: httpx.AsyncClient, runtime: int, base: Path, live: list[str],
                      dormant: list[str]) -> dict[str, Any]:
    """Per prompt: to a live session, then waking a dormant one; the wake's own = their difference."""
    out: dict[str, Any] = {}
    c0, t0 = await costs(r, runtime, base), time.monotonic()
    await asyncio.sleep(IDLE_S)  # what the idle stack spends a second (polls, renewals), taken off below
    idle = {k: (v - c0[k]) / (time.monotonic() - t0) for k, v in (await costs(r, runtime, base)).items()}
    for name, sids in (("live_prompt", live), ("waking_prompt", dormant)):
        before = await ends(r, sids)
        c0, t0 = await costs(r, runtime, base), time.monotonic()
        await post_all(http, sids, {"message": "hi"}, ramp_s=2.0)
        await until_more(r, sids, before, 120)
        c1, spent = await costs(r, runtime, base), time.monotonic() - t0
        out[name] = per_unit(c0, {k: v - idle[k] * spent for k, v in c1.items()}, len(sids))
    out["idle_per_s"] = per_unit({k: 0.0 for k in idle}, idle, 1)
    out["wake_only"] = {k: round(out["waking_prompt"][k] - out["live_prompt"][k], 2) for k in out["live_prompt"]}
    out["note"] = "per prompt, minus the idle stack's rate (idle_per_s) over the phase; redis_cmds: all clients"
    return out


async def prepare(r: aioredis.Redis, http: httpx.AsyncClient, n: int, suspend: list[int], fresh: int) -> list[str]:
    """`n` sessions, the last `fresh` never woken; the others answer a first prompt (a transcript to
    restore), then those at the indices `suspend` are suspended."""
    sids = await create_sessions(http, n)
    woken = sids[:n - fresh]
    await post_all(http, woken, {"message": "hi"}, ramp_s=n / 100)
    await until_more(r, woken, dict.fromkeys(woken, 0), 120 + n * 0.3)
    sem = asyncio.Semaphore(50)

    async def down(sid: str) -> None:
        async with sem:
            resp = await http.post(f"/sessions/{sid}/suspend")
            if resp.status_code != 200:
                raise RuntimeError(f"suspend: {resp.status_code} {resp.text[:200]}")
    await asyncio.gather(*(down(sids[i]) for i in suspend))
    return sids


async def run_stack(args: argparse.Namespace, src: Path | None, label: str) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="gamma-bench-wake-"))
    url, redis_proc = start_redis_server()
    (base / "data").mkdir()
    stack = Stack(redis_url=url + "/0", data_dir=base / "data", env_overrides={
        "GAMMA_LEASE_MS": "10000", "GAMMA_CLAIM_IDLE_MS": "5000", "GAMMA_IDLE_S": "600",
        "GAMMA_SESSION_CREATES_PER_MINUTE": "100000", "GAMMA_MAX_SESSIONS_PER_USER": "100000",
        "GAMMA_SCRIPTED_PROFILE": "fast_gpt", "GAMMA_SCRIPTED_STAMP": "true",
        "GAMMA_SCRIPTED_TOKENS_PER_S": str(args.rate),
        **({"GAMMA_RUNTIME_WAKES_AT_ONCE": str(args.at_once)} if args.at_once else {}),
        **({"GAMMA_RUNTIME_WAKES_PER_READ": str(args.per_read)} if args.per_read else {})}, src=src,
        service_env={"runtime": fsync_counting(src, base)})
    r = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(url + "/0", max_connections=40, timeout=60))
    http = httpx.AsyncClient(base_url=stack.url("proxy"), headers={"Authorization": f"Bearer {API_TOKEN}"},
                             timeout=60, limits=httpx.Limits(max_connections=100))
    n_s, n_d, n_q = args.streaming, args.dormant, args.quiet
    try:
        stack.start()
        # [streaming | quiet | dormant re-wakes | dormant first wakes]: the first wakes never woken.
        n_first = round(n_d * args.first_share)
        sids = await prepare(r, http, n_s + n_q + n_d, list(range(n_s, n_s + n_q + n_d - n_first)), n_first)
        streaming, quiet, dormant = sids[:n_s], sids[n_s:n_s + n_q], sids[n_s + n_q:]
        first = set(dormant[n_d - n_first:])
        runtime = stack.procs["runtime"].pid
        before = await ends(r, streaming + dormant)
        c0 = await costs(r, runtime, base)
        script = "script:" + json.dumps([{"content": "@ts@" * args.tokens, "tool_calls": [TOOL]}])
        streams = asyncio.ensure_future(post_all(http, streaming, {"message": script}, ramp_s=1.0))
        await asyncio.sleep(args.wake_after_s)
        spy = await asyncio.create_subprocess_exec(
            args.py_spy, "record", "-p", str(runtime), "-d", str(args.py_spy_s), "-r", "100", "-f", "raw",
            "-o", str(Path("/tmp") / f"wake_load-{label}.folded"),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL) if args.py_spy else None
        sent = await wake_at_rate(http, dormant, args.wake_rate)
        await streams
        await until_more(r, streaming + dormant, before, 300)
        c1 = await costs(r, runtime, base)
        if spy is not None:
            await spy.wait()
        lives, wakes = await lifecycle_lives(r), await wake_entries(r)
        firsts = await asyncio.gather(*(first_event(r, s, sent[s]) for s in dormant))
        clocks = wake_log(stack.log("runtime"), set(dormant))
        quiet_cost = await quiet_costs(r, http, runtime, base, dormant[:n_q], quiet) if n_q else {}
    finally:
        await http.aclose()
        await r.aclose()
        stack.stop()
        redis_proc.terminate()
    to_live = {sid: sum(c.get(f"{s}_ms", 0.0) for s in STEPS) for sid, c in clocks.items()}
    return {
        "label": label, "load_average": [round(x, 2) for x in os.getloadavg()],
        "wakes": len(dormant), "first_wakes": len(first), "wakes_logged": len(clocks),
        "wake_read_to_live": dist(list(to_live.values())),
        "wake_read_to_live_by_kind": {
            "first": dist([v for s, v in to_live.items() if s in first]),
            "rewake": dist([v for s, v in to_live.items() if s not in first])},
        "wake_steps_ms": {s: dist([c.get(f"{s}_ms", 0.0) for c in clocks.values()]) for s in (*STEPS, "status", "reader")},
        # The queue included: from the proxy's XADD of the Wake to the SessionLive.
        "wake_xadd_to_live": dist([(lives[s] - wakes[s]) * 1000 for s in dormant if s in lives and s in wakes]),
        "post_to_live": dist([(lives[s] - sent[s]) * 1000 for s in dormant if s in lives]),
        "post_to_first_event": dist([(f - sent[s]) * 1000 for s, f in zip(dormant, firsts, strict=True) if f is not None]),
        "load_phase_totals": per_unit(c0, c1, 1),
        "quiet_per_prompt": quiet_cost,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'run':<8} {'read->live p50/p99':>20} {'XADD->live p50/p99':>20} {'POST->live p50/p99':>20} {'POST->1st ev p50/p99':>21} "
             f"{'wake CPU ms':>11} {'cmds':>6} {'fsyncs':>6} {'load':>6}"]
    for row in rows:
        w, q = row["wake_read_to_live"], row["quiet_per_prompt"].get("wake_only", {})
        pl, fe = row["post_to_live"], row["post_to_first_event"]
        x = row["wake_xadd_to_live"]
        lines.append(f"{row['label']:<8} {w['p50_ms']!s:>9}/{w['p99_ms']!s:<10} {x['p50_ms']!s:>9}/{x['p99_ms']!s:<10} {pl['p50_ms']!s:>9}/{pl['p99_ms']!s:<10} "
                     f"{fe['p50_ms']!s:>9}/{fe['p99_ms']!s:<11} {q.get('runtime_cpu_ms')!s:>11} "
                     f"{q.get('redis_cmds')!s:>6} {q.get('fsyncs')!s:>6} {row['load_average'][0]:>6}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streaming", type=int, default=100)
    parser.add_argument("--dormant", type=int, default=100)
    parser.add_argument("--quiet", type=int, default=40, help="dormant sessions woken after the streams (costs)")
    parser.add_argument("--first-share", type=float, default=0.5,
                        help="of the dormant sessions woken under load, those never woken before (no transcript)")
    parser.add_argument("--tokens", type=int, default=800, help="per streaming answer (80/s: 10 s)")
    parser.add_argument("--rate", type=float, default=80.0, help="tokens per second per streaming session")
    parser.add_argument("--wake-rate", type=float, default=20.0, help="wakes per second; 0: all at once")
    parser.add_argument("--at-once", type=int, default=0, help="GAMMA_RUNTIME_WAKES_AT_ONCE (0: its default)")
    parser.add_argument("--per-read", type=int, default=0, help="GAMMA_RUNTIME_WAKES_PER_READ (0: its default)")
    parser.add_argument("--wake-after-s", type=float, default=2.5, help="after the first streaming prompt")
    parser.add_argument("--py-spy", default=None, help="py-spy binary: profile the runtime during the wakes")
    parser.add_argument("--py-spy-s", type=int, default=8)
    parser.add_argument("--label", default="after")
    parser.add_argument("--before-src", type=Path, default=None, help="a source tree run first (`git archive`)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    if args.before_src is not None:
        rows.append(asyncio.run(run_stack(args, args.before_src, "before")))
    rows.append(asyncio.run(run_stack(args, None, args.label)))
    print(table(rows))
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k not in ("out", "py_spy")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # The baseline tree's run beside this one's: `<out>.before.json` (same config, minutes apart).
    outs = [(args.out.with_suffix(".before.json"), rows[:1]), (args.out, rows[1:])] if len(rows) > 1 else [(args.out, rows)]
    for path, runs in outs:
        path.write_text(json.dumps({"bench": "wake_load", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "machine": {"cpus": os.cpu_count()}, "config": config, "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
