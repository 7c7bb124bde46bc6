"""`make eval`: workflow evaluations (docs/architecture.md "Scoped knowledge, skill rules, dynamic tools") through the real stack.

Each scenario of `evals/*.yaml` (bench/eval_checks.py) runs several times, each in a session of its
own, through the five services as processes: the proxy's HTTP API creates the session and posts
the prompt, the runtime runs the configured model, the transcript comes back through
`GET /sessions/{sid}/transcript` and is judged: the skills loaded in the first tool batch, the
required steps in order, no forbidden action, the expected yield, no completion audit that had to
intervene. Offline the model is the scripted one, driven by the scenario's policy (which may skip a
step on purpose: then the audit and these checks must catch it, `expect`); with OPENAI_API_KEY set
it is the real model, given only the scenario's prompt, and the table measures the seed's question:
do strict workflow skills prevent skipped steps?

Prints a table (pass rate per check and scenario) and writes bench/results/eval.json. Exit 1 when a
scripted run does not show what its scenario expects (a caught skip went uncaught, or a clean run
failed a check).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.eval_checks import CHECKS, Scenario, after_prompt, as_expected, judge, load_scenarios, yielded  # noqa: E402
from services.runtime.skillset.skills import Skill, load_skills  # noqa: E402
from shared.contracts.records.transcript import parse_entries  # noqa: E402
from tests.support.redis_server import base_redis_url, start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, Stack  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "eval.json"
EVALS = ROOT / "evals"


class Client:
    def __init__(self, base: str, timeout_s: float) -> None:
        # Idle connections are dropped well before uvicorn closes them (5 s): reusing one the server is
        # closing answers "Server disconnected without sending a response" (seen once under load).
        self.http = httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30,
                                      limits=httpx.Limits(keepalive_expiry=1.0))
        self.timeout_s = timeout_s

    async def transcript(self, sid: str) -> list[Any]:
        raw: list[dict[str, Any]] = []
        cursor = "0"
        while True:
            page = (await self.http.get(f"/sessions/{sid}/transcript", params={"cursor": cursor})).json()
            raw += page["entries"]
            if not page["has_more"]:
                return parse_entries(raw)
            cursor = page["next_cursor"]

    async def ask(self, sid: str, prompt: str) -> list[Any]:
        """Post the prompt, wait for the run's yield (polling the transcript), return the entries."""
        r = await self.http.post(f"/sessions/{sid}/messages", json={"message": prompt})
        r.raise_for_status()
        deadline = time.monotonic() + self.timeout_s
        delay = 0.2
        while time.monotonic() < deadline:
            entries = await self.transcript(sid)
            if yielded(after_prompt(entries, prompt)):
                return entries
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 1.0)
        raise TimeoutError(f"{sid}: no yield after {self.timeout_s:.0f} s for {prompt[:60]!r}")


async def one_run(client: Client, s: Scenario, real: bool, skills: dict[str, Skill]) -> dict[str, Any]:
    sid = (await client.http.post("/sessions", json={})).json()["id"]
    prompt = s.prompt if real else s.offline_prompt()
    started = time.monotonic()
    try:
        for setup in s.setup:
            await client.ask(sid, setup)
        entries = await client.ask(sid, prompt)
    except TimeoutError as exc:
        return {"session": sid, "error": str(exc), "checks": dict.fromkeys(CHECKS, False), "audits": [],
                "as_expected": False, "seconds": round(time.monotonic() - started, 2)}
    result = judge(s, after_prompt(entries, prompt), skills)
    result.update(session=sid, seconds=round(time.monotonic() - started, 2))
    result["as_expected"] = True if real else as_expected(s, result)
    return result


async def evaluate(base: str, scenarios: list[Scenario], runs: int, real: bool, skills: dict[str, Skill],
                   concurrency: int, timeout_s: float) -> dict[str, list[dict[str, Any]]]:
    client = Client(base, timeout_s)
    gate = asyncio.Semaphore(concurrency)

    async def guarded(s: Scenario) -> dict[str, Any]:
        async with gate:
            return await one_run(client, s, real, skills)

    try:
        jobs = {s.name: [asyncio.create_task(guarded(s)) for _ in range(runs)] for s in scenarios}
        return {name: [await t for t in tasks] for name, tasks in jobs.items()}
    finally:
        await client.http.aclose()


def table(scenarios: list[Scenario], results: dict[str, list[dict[str, Any]]], real: bool) -> str:
    head = ["scenario", *CHECKS, "audits", "as expected"]
    rows = [head]
    for s in scenarios:
        runs = results[s.name]
        n = len(runs)
        cells = [s.name]
        for c in CHECKS:
            rate = sum(r["checks"][c] for r in runs) / n
            mark = "" if real or s.expected(c) else " (want 0%)"
            cells.append(f"{rate:.0%}{mark}")
        cells.append(",".join(runs[0].get("audits") or ["-"]))
        cells.append(f"{sum(r['as_expected'] for r in runs)}/{n}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summarize(scenarios: list[Scenario], results: dict[str, list[dict[str, Any]]], real: bool) -> dict[str, Any]:
    every = [r for rs in results.values() for r in rs]
    clean = [r for s in scenarios if not s.scripted.skip for r in results[s.name]]
    return {
        "model": os.environ.get("GAMMA_EVAL_MODEL", "real (OPENAI_API_KEY)") if real
        else "scripted (offline, behind the real openai client)",
        "runs": len(every),
        "pass_rate": {c: round(sum(r["checks"][c] for r in every) / max(len(every), 1), 3) for c in CHECKS},
        "pass_rate_clean_policies": {c: round(sum(r["checks"][c] for r in clean) / max(len(clean), 1), 3)
                                     for c in CHECKS},
        "as_expected": sum(r["as_expected"] for r in every),
        "audits": {o: sum(r["audits"].count(o) for r in every)
                   for o in ("passed", "blocked", "deviations_reported", "deviations_unreported")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per scenario")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--json", type=Path, default=RESULTS)
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per prompt")
    ap.add_argument("--redis-url", default="", help="a Redis db the stack may flush (default: a redis-server of "
                    "its own, or db 14 of REDIS_URL)")
    args = ap.parse_args(argv)
    skills = load_skills(ROOT / "skills")
    scenarios = load_scenarios(EVALS, skills)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.name for s in scenarios}
        if unknown:
            ap.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
        scenarios = [s for s in scenarios if s.name in wanted]
    real = bool(os.environ.get("OPENAI_API_KEY"))
    redis_proc = None
    db_url = args.redis_url
    if not db_url and os.environ.get("REDIS_URL"):
        db_url = f"{base_redis_url()}/14"
    if not db_url:
        url, redis_proc = start_redis_server()
        db_url = f"{url}/0"
    env = {"GAMMA_IDLE_S": "120"}
    if real:
        env["OPENAI_API_KEY"] = os.environ["OPENAI_API_KEY"]  # the test Stack drops it by default
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gamma-eval-") as tmp:
        stack = Stack(redis_url=db_url, data_dir=Path(tmp), env_overrides=env)
        try:
            _flush(stack.redis_url)
            stack.start()
            results = asyncio.run(evaluate(stack.url(), scenarios, args.runs, real, skills, args.concurrency,
                                           args.timeout))
        finally:
            stack.stop()
            if redis_proc is not None:
                redis_proc.terminate()
    print(table(scenarios, results, real))
    summary = summarize(scenarios, results, real)
    summary["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(summary))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "summary": summary, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                        "note": "shared with other workloads; timings are indicative"},
        "scenarios": {s.name: {"description": s.description, "runs": results[s.name]} for s in scenarios},
    }, indent=1, default=str))
    return 0 if real or summary["as_expected"] == summary["runs"] else 1


def _flush(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()


if __name__ == "__main__":
    raise SystemExit(main())
