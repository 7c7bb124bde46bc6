"""`make bench-sandbox`: what the agent-command sandbox adds per call, and whether a fork bomb in one
session slows another session down.

- per call: `true` and `python3 -c pass` through each sandbox layer that works on this machine
  (services/runtime/sandbox: the same Sandbox.run the bash tool uses: workspace hand-over, fds, spawn,
  capped output, group kill), side by side with the bare subprocess (`bash -c CMD` through the same
  runner, no confinement), interleaved call by call over --calls calls (200);
- fork-bomb isolation: a real runtime (scripted model, real Redis) per layer; session B's prompt ->
  answer round trip, alone and while session A's bash runs a fork bomb until its timeout.
Prints a table and writes bench/results/sandbox.json (`layer`, `bare_p50_ms`, `sandboxed_p50_ms`,
`added_p50_ms`, `added_p99_ms` for `true` under the layer `auto` picks, and the same per layer).
Target: added p50 <= 10 ms per call. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.runtime.sandbox import Sandbox, SandboxLimits, cgroup, probe_layer  # noqa: E402
from services.runtime.sandbox.runner import run_confined  # noqa: E402
from services.runtime.skillset.paths import skills_dir  # noqa: E402
from tests.integration.runtime_support import Driver, call, done, script  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import Stack  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "sandbox.json"
LAYERS = ("bwrap", "landlock")
COMMANDS = {"true": "true", "python": "python3 -c pass"}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))]


def stats(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(ms, 50), 2), "p99_ms": round(pct(ms, 99), 2), "mean_ms": round(statistics.fmean(ms), 2)}


async def per_call(layers: list[str], calls: int, work: Path) -> dict[str, Any]:
    skills = skills_dir().resolve()
    limits = SandboxLimits()
    base = cgroup.find_base(limits.cgroup)  # as the runtime's selection does: a memory cgroup per call where offered
    boxes = {layer: Sandbox(layer, limits, cgroup=base) for layer in layers}  # type: ignore[arg-type]
    times: dict[str, dict[str, list[float]]] = {c: {"bare": [], **{layer: [] for layer in layers}} for c in COMMANDS}
    ws = work / "workspace"
    ws.mkdir()
    for _ in range(calls):
        for name, cmd in COMMANDS.items():
            t = time.perf_counter()
            await run_confined(["/bin/bash", "-c", cmd], env={"PATH": "/usr/bin:/bin"}, cwd=str(ws), wall_s=30,
                               stop=None, output_chars=30_000)
            times[name]["bare"].append((time.perf_counter() - t) * 1000)
            for layer, box in boxes.items():
                t = time.perf_counter()
                # the bash tool hands the watchdog its own measure of the workspace from before the call
                res = await box.run(box.request(cmd, ws, skills, 30).model_copy(update={"workspace_usage": (0, 0)}))
                times[name][layer].append((time.perf_counter() - t) * 1000)
                assert res.exit_code == 0, res
    out: dict[str, Any] = {}
    for name in COMMANDS:
        bare = stats(times[name]["bare"])
        out[name] = {"bare": bare}
        for layer in layers:
            s = stats(times[name][layer])
            out[name][layer] = {**s, "added_p50_ms": round(s["p50_ms"] - bare["p50_ms"], 2),
                                "added_p99_ms": round(s["p99_ms"] - bare["p99_ms"], 2)}
    return out


def round_trip(d: Driver, sid: str, text: str) -> float:
    seen = len(d.message_users(sid))
    started = time.monotonic()
    d.prompt(sid, text)
    if not d.live(sid):
        d.wake(sid)
    while len(d.message_users(sid)) <= seen:
        if time.monotonic() - started > 60:
            raise RuntimeError("no answer")
        time.sleep(0.002)
    return (time.monotonic() - started) * 1000


def fork_bomb(layer: str, redis_url: str, work: Path, pings: int) -> dict[str, Any]:
    stack = Stack(redis_url=redis_url, data_dir=work / f"data-{layer}",
                  env_overrides={"GAMMA_SANDBOX": layer, "GAMMA_IDLE_S": "300"})
    stack.start("runtime")
    try:
        d = Driver(redis_url)
        round_trip(d, "bench-b", "warm up")
        quiet = [round_trip(d, "bench-b", f"quiet {i}") for i in range(pings)]
        bomb = "bomb() { bomb | bomb & }; bomb; sleep 60"
        d.prompt("bench-a", script({"tool_calls": [call("bash", command=bomb, timeout=8)]}, done()))
        d.wake("bench-a")
        d.wait_event("bench-a", lambda e: e["type"] == "tool_execution_start", what="bomb started")
        time.sleep(1.0)
        during = [round_trip(d, "bench-b", f"during {i}") for i in range(pings)]
        d.wait_event("bench-a", lambda e: e["type"] == "agent_end", timeout=60, what="bomb ended")
    finally:
        stack.stop()
    return {"quiet": stats(quiet), "during_bomb": {**stats(during), "max_ms": round(max(during), 2)},
            "pings": pings, "max_procs": SandboxLimits().max_procs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--pings", type=int, default=20)
    args = ap.parse_args()
    skills = skills_dir().resolve()
    layers = [layer for layer in LAYERS if probe_layer(layer, SandboxLimits(), skills) is None]  # type: ignore[arg-type]
    if not layers:
        sys.exit("no sandbox layer works on this machine")
    work = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    redis_url, redis = start_redis_server()
    try:
        calls = asyncio.run(per_call(layers, args.calls, work))
        bombs = {layer: fork_bomb(layer, f"{redis_url}/{i + 1}", work, args.pings) for i, layer in enumerate(layers)}
    finally:
        redis.terminate()
        redis.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    best = layers[0]
    t = calls["true"]
    result = {"layer": best, "calls": args.calls, "bare_p50_ms": t["bare"]["p50_ms"],
              "sandboxed_p50_ms": t[best]["p50_ms"], "added_p50_ms": t[best]["added_p50_ms"],
              "added_p99_ms": t[best]["added_p99_ms"], "target_added_p50_ms": 10.0,
              "per_layer": {layer: {"true": t[layer], "python": calls["python"][layer]} for layer in layers},
              "bare": {"true": t["bare"], "python": calls["python"]["bare"]}, "fork_bomb": bombs,
              "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
              "as_root": os.geteuid() == 0}
    print(f"{'command':10} {'path':10} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'added p99':>10}")
    for name in COMMANDS:
        c = calls[name]
        print(f"{name:10} {'bare':10} {c['bare']['p50_ms']:8.2f} {c['bare']['p99_ms']:8.2f}")
        for layer in layers:
            s = c[layer]
            print(f"{name:10} {layer:10} {s['p50_ms']:8.2f} {s['p99_ms']:8.2f} {s['added_p50_ms']:10.2f} "
                  f"{s['added_p99_ms']:10.2f}")
    for layer, b in bombs.items():
        print(f"fork bomb ({layer}): other session's round trip p50 {b['quiet']['p50_ms']:.1f} ms quiet, "
              f"{b['during_bomb']['p50_ms']:.1f} ms during (max {b['during_bomb']['max_ms']:.1f} ms)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
