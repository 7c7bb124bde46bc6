"""`make bench-prefix`: prompt-cache friendliness of the runtime's requests, against a baseline.

50 sessions x 20 turns through the real runtime worker (in this process, real Redis, the scripted
model behind the real openai client), with injections, skill loads and todo updates. Every request
body the model receives is recorded. Measured on those bodies, side by side:
- runtime: the requests as sent (stable system prompt + tool schemas; skills, todo and injections
  travel as messages);
- baseline: the same conversations as a harness that edits the system prompt per request (active
  skill bodies, the todo list and the latest injections in a state block inside the system prompt).
Metrics: static_prefix_identical_ratio (requests whose system prompt + tool schemas equal the most
common one), median_shared_prefix_ratio (tokens shared with the session's previous request / prompt
tokens), requests. Prints a table, writes bench/results/prefix.json. Not a timed test.

The workload runs once per model API (Responses, without and with reasoning replayed; Chat
Completions; Chat Completions as sent to a non-OpenAI server, without prompt_cache_key and with the
harness's messages user-role; Chat Completions with dynamic tools; and with GAMMA_TRUSTED_ROLE=user,
against the developer role of the `chat` run). For each, from the runtime's own
`model_request` events: the static-prefix identity, the computed shared share (our token count), and
the API-reported cached share (`cached_tokens / input_tokens` from the usage the API returned; the
scripted server simulates OpenAI's exact-prefix cache: 128-token steps past 1,024, per
prompt_cache_key). The baseline comparison uses the Chat Completions run's bodies.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import hashlib
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripted.gamma import ScriptedGamma  # noqa: E402
from scripted.transport import scripted_client  # noqa: E402
from scripted.types import ScriptedReply  # noqa: E402
from services.proxy.rows import SessionRow  # noqa: E402
from services.runtime.app import skills_dir  # noqa: E402
from services.runtime.hosting.worker import Worker  # noqa: E402
from services.runtime.model.openai_stream import PieceTokens, request_pieces  # noqa: E402
from services.runtime.skillset.prompt import VARIANTS, build_system_prompt  # noqa: E402
from services.runtime.skillset.skills import load_skills  # noqa: E402
from services.stack import redis_answers  # noqa: E402
from shared.contracts.http import ModelConfig  # noqa: E402
from shared.contracts.records.injection import RuntimeInjection  # noqa: E402
from shared.contracts.streams.inbox import Barrier, Injection, UserPrompt  # noqa: E402
from shared.contracts.streams.wake import Wake  # noqa: E402
from shared.history.tokens import TokenCounter, shared_prefix  # noqa: E402
from shared.redis import keys  # noqa: E402
from shared.redis.reconnect import connect  # noqa: E402
from shared.settings import Settings  # noqa: E402
from shared.streams import inbox  # noqa: E402
from shared.telemetry.logging import configure_logging  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "prefix.json"


# ---------------------------------------------------------------- an in-process runtime worker


def redis_url() -> str:
    """A Redis server of our own (never a shared one: the harness flushes nothing, but others' data
    and load would skew the figures); REDIS_URL only when BENCH_REDIS_URL says so explicitly."""
    explicit = os.environ.get("BENCH_REDIS_URL")
    if explicit and redis_answers(explicit):
        return explicit
    url, proc = start_redis_server()
    atexit.register(proc.terminate)
    return url + "/0"


class Harness:
    """The runtime's Worker in this process; the bus is a plain XADD (no FastStream consumers here)."""

    def __init__(self, url: str, data_dir: Path, model: Callable[[dict[str, Any]], ScriptedReply],
                 idle_s: float = 3600, api: str = "chat", base_url: str | None = None,
                 effort: str | None = None, dynamic_tools: bool = False, trusted_role: str | None = None,
                 overrides: dict[str, Any] | None = None, **extra: Any) -> None:
        self.effort = effort
        self.settings = Settings(REDIS_URL=url, GAMMA_DATA_DIR=data_dir, GAMMA_IDLE_S=idle_s,  # type: ignore[call-arg]
                                 GAMMA_LEASE_MS=10_000, OPENAI_API_KEY=None, GAMMA_MODEL_API=api,
                                 OPENAI_BASE_URL=base_url, GAMMA_DYNAMIC_TOOLS=dynamic_tools,
                                 GAMMA_TRUSTED_ROLE=trusted_role, **(overrides or {}), **extra)
        self.client = connect(url)  # the runtime's own client (shared/serving/service.py): its pool waits when full
        self.skills = load_skills(skills_dir())
        prompts: dict[str, str] = {v: build_system_prompt(v, self.skills) for v in VARIANTS}

        # What a bench times on the bus (a SessionLive's publish): hooks called after each XADD. The
        # worker hands its bus to every session it builds (WorkerParts), so it is hooked here, not swapped.
        self.on_publish: list[Callable[[BaseModel], object]] = []

        async def bus(stream: str, message: BaseModel) -> None:
            await self.client.xadd(stream, {"data": message.model_dump_json()})
            for hook in self.on_publish:
                hook(message)

        self._seen: dict[str, tuple[str, int]] = {}  # sid -> (last event id read, yields so far)
        self.worker = Worker(self.settings, self.client, scripted_client(model), self.skills, prompts,
                             bus, f"bench-{time.monotonic_ns()}")

    async def start(self) -> None:
        self.worker.start()

    async def stop(self) -> None:
        await self.worker.shutdown()
        await self.client.aclose()

    async def model_requests(self, sid: str) -> list[dict[str, Any]]:
        """The session's `model_request` events (what the runtime counted and what the API reported)."""
        out = []
        for _, fields in await self.client.xrange(keys.events(sid)):
            ev = json.loads(fields[b"data"])
            if ev["type"] == "model_request":
                out.append(ev["data"])
        return out

    async def wake(self, sid: str) -> None:
        if self.effort:  # a session row as POST /sessions writes it, with reasoning on
            now = int(time.time() * 1000)
            row = SessionRow(id=sid, owner="bench", model=ModelConfig(reasoning_effort=self.effort),  # type: ignore[arg-type]
                             created_at=now, updated_at=now)
            await self.client.hset(keys.session_row(sid), mapping=row.to_hash())  # type: ignore[arg-type]
        wake = Wake(session_id=sid)
        await self.worker.on_wake(wake)
        await inbox.append(self.client, Barrier(session_id=sid, wake_id=wake.wake_id))

    async def turn(self, sid: str, text: str, limit_s: float = 120) -> None:
        """Send a prompt and wait until its run has ended with a blocking message_user."""
        before = await self.yields(sid)
        await inbox.append(self.client, UserPrompt(session_id=sid, message=text))
        deadline = time.monotonic() + limit_s
        while await self.yields(sid) <= before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sid}: no answer to {text[:60]!r}")
            await asyncio.sleep(0.02)
        task = self.worker.sessions[sid].state.run_task
        if task is not None:
            await asyncio.wait({task})  # the run has finished its bookkeeping

    async def yields(self, sid: str) -> int:
        """Blocking message_user events so far, reading only what is new since the last call."""
        last, n = self._seen.get(sid, ("-", 0))
        start = "(" + last if last != "-" else "-"
        for entry_id, fields in await self.client.xrange(keys.events(sid), min=start):
            ev = json.loads(fields[b"data"])
            if ev["type"] == "message_user" and ev["data"]["block_on_user"]:
                n += 1
            last = entry_id.decode()
        self._seen[sid] = (last, n)
        return n

    async def inject(self, sid: str, kind: str, content: str, source_id: str, ref: str | None = None) -> None:
        await inbox.append(self.client, Injection(
            session_id=sid, injection=RuntimeInjection(kind=kind, content=content),  # type: ignore[arg-type]
            source="artifact" if kind == "artifact_update" else "notification", source_id=source_id, ref=ref))


# ---------------------------------------------------------------- the workload


def script(*steps: dict[str, Any]) -> str:
    return "script:" + json.dumps(list(steps))


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def done(text: str) -> dict[str, Any]:
    return {"tool_calls": [call("message_user", message=text, blockOnUser=True)]}


REFERENCE_SKILLS = ("ask-user-questions", "gml-cli", "gml-authoring")


def turn_text(i: int, t: int) -> str:
    if t == 0:
        return f"Create a presentation about topic {i}: renewable energy case {i}"
    if t % 5 == 1:
        return script({"tool_calls": [call("skill", name=REFERENCE_SKILLS[(i + t) % 3])]}, done(f"loaded {t}"))
    if t % 5 == 2:
        items = [{"id": f"t{t}", "content": f"Revise card {t}", "status": "in_progress"},
                 {"id": f"u{t}", "content": "Check the theme", "status": "pending"}]
        finished = [{**it, "status": "complete"} for it in items]
        return script({"tool_calls": [call("todo", items=items)]},
                      {"tool_calls": [call("read", path="brief.xml")]},
                      {"tool_calls": [call("todo", items=finished)]}, done(f"revised {t}"))
    if t % 5 == 3:
        return script({"tool_calls": [call("write", path=f"notes/n{t}.md", content=f"note {t} " * 20),
                                      call("message_user", message="writing", blockOnUser=False)]},
                      done(f"noted {t}"))
    return f"Turn {t}: what changed since last time?"


async def inject_before(h: Harness, sid: str, i: int, t: int) -> None:
    if t % 2 == 0:
        await h.inject(sid, "system_note", f"<system_note>note {t}</system_note>", f"{sid}-note-{t}")
    if t % 3 == 0:
        await h.inject(sid, "client_view", f"<client_view>The user opened card {t % 5 + 1}.</client_view>",
                       f"{sid}-view-{t}")
    if t % 4 == 0:
        await h.inject(sid, "artifact_update", f'<artifact_update ref="gamma:file:deck" from_revision="{t}" '
                       f'to_revision="{t + 1}">Card card_{t % 5 + 1} changed.</artifact_update>',
                       f"gamma:file:deck@{t + 1}", ref="gamma:file:deck")


async def run_session(h: Harness, i: int, turns: int) -> None:
    sid = f"bench{i:03d}"
    await h.wake(sid)
    for t in range(turns):
        if t:
            await inject_before(h, sid, i, t)
        await h.turn(sid, turn_text(i, t))


# ---------------------------------------------------------------- measurement


class Recorder:
    """Wraps the scripted model and keeps every request body."""

    def __init__(self, model: Callable[[dict[str, Any]], ScriptedReply]) -> None:
        self.model = model
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        self.bodies.append(json.loads(json.dumps(body)))
        return self.model(body)


def _injection(m: dict[str, Any]) -> bool:
    """A harness block: a developer message, or a user-role one opening with its tag (user text never
    does: model/convert.py neutralises it)."""
    return m["role"] in ("developer", "user") and str(m["content"]).startswith("<")


def baseline_body(body: dict[str, Any]) -> dict[str, Any]:
    """The same request from a harness that keeps session state in the system prompt."""
    messages = body["messages"]
    skills: dict[str, str] = {}
    todo = ""
    notes: list[str] = []
    calls: dict[str, dict[str, Any]] = {}
    for m in messages[1:]:
        for c in m.get("tool_calls") or []:
            calls[c["id"]] = c["function"]
        if m["role"] == "tool" and calls.get(m["tool_call_id"], {}).get("name") == "skill":
            skills[json.loads(calls[m["tool_call_id"]]["arguments"])["name"]] = m["content"]
        if m["role"] == "tool" and calls.get(m["tool_call_id"], {}).get("name") == "todo":
            todo = m["content"]
        if _injection(m):
            notes = (notes + [m["content"]])[-3:]
    state = "\n\n<session_state>\n" + "\n".join(skills.values()) + "\n" + todo + "\n" + "\n".join(notes)
    state += "\n</session_state>"
    kept = [m for m in messages[1:] if not _injection(m)]
    return {**body, "messages": [{"role": "system", "content": messages[0]["content"] + state}, *kept]}


def measure(bodies: list[dict[str, Any]], counter: TokenCounter) -> dict[str, Any]:
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for b in bodies:
        if len(b["messages"]) > 1 and any(t["function"]["name"] == "message_user" for t in b.get("tools", [])):
            by_session[b["messages"][1]["content"]].append(b)
    hashes: list[str] = []
    ratios: list[float] = []
    tokens: list[int] = []
    for reqs in by_session.values():
        pieces = PieceTokens(counter)
        previous = None
        for b in reqs:
            static = json.dumps([b["messages"][0], b.get("tools", [])], sort_keys=True)
            hashes.append(hashlib.sha256(static.encode()).hexdigest())
            toks = pieces.encode(request_pieces(b["messages"], b.get("tools", [])))
            tokens.append(len(toks))
            if previous is not None:
                ratios.append(shared_prefix(previous, toks) / len(toks))
            previous = toks
    top = Counter(hashes).most_common(1)[0][1] if hashes else 0
    return {
        "requests": len(hashes),
        "static_prefix_identical_ratio": round(top / len(hashes), 4) if hashes else 0.0,
        "median_shared_prefix_ratio": round(statistics.median(ratios), 4) if ratios else 0.0,
        "mean_shared_prefix_ratio": round(statistics.fmean(ratios), 4) if ratios else 0.0,
        "median_prompt_tokens": int(statistics.median(tokens)) if tokens else 0,
    }


def measure_api(by_session: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """From `model_request` events: identity of the static prefix, our computed shared share, and the
    cached share the API reported (the first request of a session has nothing before it: left out of
    the medians, kept in the totals)."""
    hashes = [r["prefix_sha256"] for reqs in by_session.values() for r in reqs]
    computed = [r["shared_prefix_tokens"] / r["prompt_tokens"] for reqs in by_session.values() for r in reqs[1:]
                if r["prompt_tokens"]]
    cached = [r["cached_tokens"] / r["input_tokens"] for reqs in by_session.values() for r in reqs[1:]
              if r["input_tokens"]]
    all_reqs = [r for reqs in by_session.values() for r in reqs]
    total_in = sum(r["input_tokens"] for r in all_reqs)
    top = Counter(hashes).most_common(1)[0][1] if hashes else 0
    return {
        "requests": len(all_reqs),
        "static_prefix_identical_ratio": round(top / len(hashes), 4) if hashes else 0.0,
        "median_shared_prefix_ratio": round(statistics.median(computed), 4) if computed else 0.0,
        "median_cached_share": round(statistics.median(cached), 4) if cached else 0.0,
        "cached_share_total": round(sum(r["cached_tokens"] for r in all_reqs) / total_in, 4) if total_in else 0.0,
        "reasoning_tokens": sum(r["reasoning_tokens"] for r in all_reqs),
        "median_input_tokens": int(statistics.median([r["input_tokens"] for r in all_reqs])) if all_reqs else 0,
    }


# (label, API, OPENAI_BASE_URL, reasoning effort, GAMMA_DYNAMIC_TOOLS, GAMMA_TRUSTED_ROLE): the fourth is
# Chat Completions as sent to a compatible server, which gets no prompt_cache_key and the user-role
# transport (the scripted model still answers: no OPENAI_API_KEY); the fifth is the `chat` run again with
# dynamic tool loading on; the last, the `chat` run with the user-role transport.
Run = tuple[str, str, str | None, str | None, bool, str | None]
RUNS: tuple[Run, ...] = (
    ("responses", "responses", None, None, False, None), ("responses_reasoning", "responses", None, "low", False, None),
    ("chat", "chat", None, None, False, None),
    ("chat_no_cache_key", "chat", "http://compatible.local/v1", None, False, None),
    ("chat_dynamic_tools", "chat", None, None, True, None), ("chat_user_role", "chat", None, None, False, "user"))


async def run_api(run: Run, sessions: int, turns: int, concurrency: int,
                  recorder: Recorder) -> tuple[dict[str, list[dict[str, Any]]], float, str]:
    _, api, base_url, effort, dynamic, role = run
    with tempfile.TemporaryDirectory(prefix="gamma-bench-prefix-") as tmp:
        h = Harness(redis_url(), Path(tmp), recorder, api=api, base_url=base_url, effort=effort, dynamic_tools=dynamic,
                    trusted_role=role)
        await h.start()
        started = time.perf_counter()
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with gate:
                await run_session(h, i, turns)

        try:
            await asyncio.gather(*(one(i) for i in range(sessions)))
            events = {f"bench{i:03d}": await h.model_requests(f"bench{i:03d}") for i in range(sessions)}
        finally:
            await h.stop()
        role = h.settings.models.trusted_role_for(h.settings.models.model, h.settings.models.default_model_api)
        return events, time.perf_counter() - started, role


async def main(sessions: int, turns: int, concurrency: int) -> dict[str, Any]:
    apis: dict[str, Any] = {}
    elapsed = 0.0
    chat_bodies: list[dict[str, Any]] = []
    bodies: dict[str, list[dict[str, Any]]] = {}
    for run in RUNS:
        label = run[0]
        recorder = Recorder(ScriptedGamma(load_skills(skills_dir())))
        events, took, role = await run_api(run, sessions, turns, concurrency, recorder)
        elapsed += took
        apis[label] = measure_api(events)
        apis[label]["trusted_role"] = role
        bodies[label] = recorder.bodies
        if label == "chat":
            chat_bodies = recorder.bodies
    counter = TokenCounter()
    dynamic = dynamic_tools_cost(apis, bodies, counter)
    runtime = measure(chat_bodies, counter)
    baseline = measure([baseline_body(b) for b in chat_bodies], counter)
    return {
        "benchmark": "prefix", "sessions": sessions, "turns": turns, "encoding": counter.encoding,
        "elapsed_s": round(elapsed, 1), "machine": platform.platform(),
        "requests": runtime["requests"],
        "static_prefix_identical_ratio": runtime["static_prefix_identical_ratio"],
        "median_shared_prefix_ratio": runtime["median_shared_prefix_ratio"],
        "targets": {"static_prefix_identical_ratio": 1.0, "median_shared_prefix_ratio": 0.95},
        "runtime": runtime, "baseline_state_in_system_prompt": baseline, "apis": apis,
        "dynamic_tools": dynamic,
    }


def tool_schema_tokens(bodies: list[dict[str, Any]], counter: TokenCounter) -> int:
    """Median tokens of the tool schemas a main-agent request carries (subagent requests left out)."""
    sizes = [counter.count(json.dumps(b.get("tools", []), sort_keys=True)) for b in bodies
             if any(t["function"]["name"] == "message_user" for t in b.get("tools", []))]
    return int(statistics.median(sizes)) if sizes else 0


def dynamic_tools_cost(apis: dict[str, Any], bodies: dict[str, list[dict[str, Any]]],
                       counter: TokenCounter) -> dict[str, Any]:
    """GAMMA_DYNAMIC_TOOLS off (`chat`) against on (`chat_dynamic_tools`): same workload, same API."""
    off, on = apis["chat"], apis["chat_dynamic_tools"]
    keys_ = ("static_prefix_identical_ratio", "median_shared_prefix_ratio", "median_cached_share",
             "cached_share_total", "median_input_tokens")
    out: dict[str, Any] = {"off": {k: off[k] for k in keys_}, "on": {k: on[k] for k in keys_}}
    out["off"]["median_tool_schema_tokens"] = tool_schema_tokens(bodies["chat"], counter)
    out["on"]["median_tool_schema_tokens"] = tool_schema_tokens(bodies["chat_dynamic_tools"], counter)
    out["on_over_off"] = {k: round(out["on"][k] / out["off"][k], 4) if out["off"][k] else None for k in out["on"]}
    return out


def dynamic_table(result: dict[str, Any]) -> str:
    d = result["dynamic_tools"]
    rows = [("GAMMA_DYNAMIC_TOOLS (chat API)", "off", "on", "on / off")]
    rows += [(k, str(d["off"][k]), str(d["on"][k]), str(d["on_over_off"][k])) for k in d["off"]]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in range(4)) for r in rows)


def api_table(result: dict[str, Any]) -> str:
    keys_ = ("trusted_role", "requests", "static_prefix_identical_ratio", "median_shared_prefix_ratio",
             "median_cached_share", "cached_share_total", "reasoning_tokens", "median_input_tokens")
    rows = [("metric (per API, from model_request events)", *result["apis"])]
    rows += [(k, *(str(result["apis"][a][k]) for a in result["apis"])) for k in keys_]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in range(len(r))) for r in rows)


def table(result: dict[str, Any]) -> str:
    rows = [("metric", "runtime", "baseline (state in system prompt)", "target")]
    for key in ("requests", "static_prefix_identical_ratio", "median_shared_prefix_ratio", "mean_shared_prefix_ratio",
                "median_prompt_tokens"):
        rows.append((key, str(result["runtime"][key]), str(result["baseline_state_in_system_prompt"][key]),
                     str(result["targets"].get(key, ""))))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in range(4)) for r in rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    configure_logging("bench", level=logging.WARNING)
    result = asyncio.run(main(args.sessions, args.turns, args.concurrency))
    print(f"prefix benchmark: {result['sessions']} sessions x {result['turns']} turns, {result['requests']} requests, "
          f"{result['elapsed_s']} s, encoding {result['encoding']}")
    print(table(result))
    print()
    print(api_table(result))
    print()
    print(dynamic_table(result))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
