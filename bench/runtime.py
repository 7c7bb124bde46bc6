"""`make bench-runtime`: runtime overhead, each figure side by side with its baseline in one run.

1. Per turn: the engine (Agent + loop + OpenAIStream with token accounting + message conversion)
   against a bare loop calling the same scripted model through the same openai client with the same
   tool schemas and the same trivial tool effects (target: engine <= 1.5x bare). The full session
   path (transcript fsyncs, events, Redis, real tools) is reported next to them.
2. Memory per idle live session: RSS growth of this process per live session held by the worker
   after one turn each (target <= 2 MB).
3. Wake: Wake -> SessionLive for a session with history on disk, against just reading and parsing
   its files (transcript.jsonl, todo.json, state.json) (target <= 2x).
Prints a table, writes bench/results/runtime.json. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import platform
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from prefix import ROOT, Harness, call, done, redis_url, script
from pydantic import BaseModel

from scripted.gamma import ScriptedGamma
from scripted.transport import scripted_client
from services.runtime.app import skills_dir
from services.runtime.engine.agent import Agent
from services.runtime.engine.types import AgentContext, AgentEvent, RunHooks, Tool, ToolContext, ToolOutcome
from services.runtime.model.openai_stream import ModelSettings, OpenAIStream
from services.runtime.skillset.prompt import build_system_prompt
from services.runtime.skillset.skills import load_skills
from services.runtime.store.transcript import read_entries
from services.runtime.tools import Toolset
from shared.contracts.records.messages import UserMessage
from shared.contracts.streams.lifecycle import SessionLive
from shared.contracts.streams.wake import Wake
from shared.history.tokens import TokenCounter
from shared.storage.disk import session_paths
from shared.telemetry.logging import configure_logging

RESULTS = ROOT / "bench" / "results" / "runtime.json"
TURN_ITEMS = [{"id": "a", "content": "Draft", "status": "in_progress"}]


def turn_prompt(t: int) -> str:
    return script({"tool_calls": [call("todo", items=TURN_ITEMS)]}, {"tool_calls": [call("read", path="brief.xml")]},
                  done(f"turn {t} done"))


def tool_schemas() -> list[dict[str, Any]]:
    """The real tool set's schemas (the closures are never called here)."""
    return [t.schema() for t in Toolset(None).tools]  # type: ignore[arg-type]


async def trivial(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    return ToolOutcome(content=f"ok {ctx.call.name}", terminate=bool(args.get("blockOnUser")))


# ---------------------------------------------------------------- 1. per turn


async def bare_turns(client: Any, system: str, schemas: list[dict[str, Any]], turns: int) -> list[float]:
    """The least a harness must do: stream, collect tool calls, answer them, loop until the yield."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    times = []
    for t in range(turns):
        start = time.perf_counter()
        messages.append({"role": "user", "content": turn_prompt(t)})
        while True:
            stream = await client.chat.completions.create(model="gpt-5-mini", messages=messages, tools=schemas, stream=True)
            calls: dict[int, dict[str, str]] = {}
            text = ""
            async for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for tc in choice.delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = tc.id or slot["id"]
                        if tc.function:
                            slot["name"] = tc.function.name or slot["name"]
                            slot["arguments"] += tc.function.arguments or ""
            messages.append({"role": "assistant", "content": text or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls.values()]})
            stop = False
            for c in calls.values():
                args = json.loads(c["arguments"] or "{}")
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": f"ok {c['name']}"})
                stop = stop or bool(args.get("blockOnUser"))
            if stop or not calls:
                break
        times.append(time.perf_counter() - start)
    return times


async def engine_turns(client: Any, system: str, schemas: list[dict[str, Any]], turns: int) -> list[float]:
    tools = [Tool(name=s["function"]["name"], description=s["function"]["description"],
                  parameters=s["function"]["parameters"], execute=trivial) for s in schemas]
    events: list[AgentEvent] = []

    async def emit(ev: AgentEvent) -> None:
        events.append(ev)

    stream = OpenAIStream(client, ModelSettings(model="gpt-5-mini"), TokenCounter())
    agent = Agent(AgentContext(system, [], tools), RunHooks(stream=stream), emit)
    times = []
    for t in range(turns):
        start = time.perf_counter()
        await agent.prompt([UserMessage(content=turn_prompt(t))])
        times.append(time.perf_counter() - start)
        events.clear()
    return times


async def session_turns(h: Harness, turns: int) -> list[float]:
    sid = "turns"
    await h.wake(sid)
    await h.turn(sid, script({"tool_calls": [call("write", path="brief.xml", content="<brief/>")]}, done("ready")))
    times = []
    for t in range(turns):
        start = time.perf_counter()
        await h.turn(sid, turn_prompt(t))
        times.append(time.perf_counter() - start)
    return times


# ---------------------------------------------------------------- 2. memory, 3. wake


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def idle_memory(h: Harness, n: int) -> dict[str, Any]:
    # Warm up: one session first, so code, encodings and caches are not counted per session.
    await h.wake("warm")
    await h.turn("warm", "hello")
    gc.collect()
    before = rss_bytes()
    # RSS alone under-counts (the allocator reuses memory freed by earlier stages), so the Python
    # heap still held after the sessions went idle is traced too; the larger figure is reported.
    tracemalloc.start()
    for i in range(n):
        sid = f"idle{i:03d}"
        await h.wake(sid)
        await h.turn(sid, "hello, remember the word heliotrope")
    await asyncio.sleep(0.2)
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    after = rss_bytes()
    rss_per = (after - before) / n / 2**20
    heap_per = traced / n / 2**20
    return {"sessions": n, "rss_before_mb": round(before / 2**20, 1), "rss_after_mb": round(after / 2**20, 1),
            "rss_per_session_mb": round(rss_per, 3), "heap_per_session_mb": round(heap_per, 3),
            "per_session_mb": round(max(rss_per, heap_per), 3)}


def read_files(data_dir: Path, sid: str) -> None:
    paths = session_paths(data_dir, sid)
    for line in paths.transcript.read_bytes().splitlines():
        json.loads(line)
    for p in (paths.todo, paths.state):
        if p.exists():
            json.loads(p.read_bytes())


async def wake_times(h: Harness, data_dir: Path, rounds: int, history_turns: int) -> dict[str, Any]:
    """Wake -> SessionLive (the moment the worker publishes it), and Wake -> ready (on_wake returned:
    the inbox is being read), against reading and parsing the session files."""
    sid = f"wakeme{history_turns}"
    await h.wake(sid)
    await h.turn(sid, "Create a presentation about tidal power")
    for t in range(history_turns):
        await h.turn(sid, turn_prompt(t))
    await h.worker.close(sid, "bench")
    live_at: list[float] = []

    def timed(message: BaseModel) -> None:
        if isinstance(message, SessionLive):
            live_at.append(time.perf_counter())

    h.on_publish.append(timed)
    wakes, ready, reads, typed = [], [], [], []
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            read_files(data_dir, sid)
            reads.append(time.perf_counter() - start)
            start = time.perf_counter()
            read_entries(session_paths(data_dir, sid).transcript)  # the typed parse a wake needs
            typed.append(time.perf_counter() - start)
            start = time.perf_counter()
            await h.worker.on_wake(Wake(session_id=sid))  # lease, restore, projections, SessionLive
            ready.append(time.perf_counter() - start)
            wakes.append(live_at[-1] - start)
            await h.worker.close(sid, "bench")
    finally:
        h.on_publish.remove(timed)
    size = session_paths(data_dir, sid).transcript.stat().st_size
    return {"transcript_bytes": size, "wake_ms": ms(wakes), "ready_ms": ms(ready), "read_files_ms": ms(reads),
            "typed_transcript_parse_ms": ms(typed),
            "ratio": round(statistics.median(wakes) / statistics.median(reads), 2),
            "ready_ratio": round(statistics.median(ready) / statistics.median(reads), 2)}


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": round(statistics.median(values) * 1000, 3), "p90": round(ordered[int(0.9 * (len(ordered) - 1))]
                                                                               * 1000, 3)}


async def main(turns: int, idle_sessions: int, wake_rounds: int, long_history: int = 100) -> dict[str, Any]:
    skills = load_skills(skills_dir())
    system = build_system_prompt("base", skills)
    schemas = tool_schemas()
    client = scripted_client(ScriptedGamma(skills))
    # Alternate the two in-process loops so drift on a shared machine hits both alike.
    bare: list[float] = []
    engine: list[float] = []
    for _ in range(3):
        bare += await bare_turns(client, system, schemas, turns)
        engine += await engine_turns(client, system, schemas, turns)
    with tempfile.TemporaryDirectory(prefix="gamma-bench-runtime-") as tmp:
        h = Harness(redis_url(), Path(tmp), ScriptedGamma(skills))
        await h.start()
        try:
            session = await session_turns(h, turns)
            wake = await wake_times(h, Path(tmp), wake_rounds, history_turns=20)
            # A longer history: the fixed cost (Redis round trips, objects) weighs less.
            wake_long = await wake_times(h, Path(tmp), wake_rounds, history_turns=long_history)
            memory = await idle_memory(h, idle_sessions)
        finally:
            await h.stop()
    per_turn = {"bare_ms": ms(bare), "engine_ms": ms(engine), "session_ms": ms(session),
                "engine_vs_bare": round(statistics.median(engine) / statistics.median(bare), 2),
                "session_vs_bare": round(statistics.median(session) / statistics.median(bare), 2),
                "requests_per_turn": 3}
    return {"benchmark": "runtime", "machine": platform.platform(), "turns": turns, "per_turn": per_turn,
            "idle_memory": memory, "wake": wake, "wake_long_history": wake_long,
            "targets": {"engine_vs_bare": 1.5, "per_session_mb": 2.0, "wake_vs_read": 2.0}}


def table(r: dict[str, Any]) -> str:
    pt, mem, wake = r["per_turn"], r["idle_memory"], r["wake"]
    rows = [
        ("measure", "value", "baseline", "ratio", "target"),
        ("turn (engine), median ms", str(pt["engine_ms"]["median"]), f"bare loop {pt['bare_ms']['median']}",
         str(pt["engine_vs_bare"]), "<= 1.5x"),
        ("turn (full session), median ms", str(pt["session_ms"]["median"]), f"bare loop {pt['bare_ms']['median']}",
         str(pt["session_vs_bare"]), "(reported)"),
        ("memory per idle live session, MB", str(mem["per_session_mb"]), "-", "-", "<= 2 MB"),
        ("wake -> SessionLive, median ms", str(wake["wake_ms"]["median"]),
         f"read files {wake['read_files_ms']['median']}", str(wake["ratio"]), "<= 2x"),
    ]
    rows.append(("wake -> ready (inbox read), median ms", str(wake["ready_ms"]["median"]),
                 f"read files {wake['read_files_ms']['median']}", str(wake["ready_ratio"]), "(reported)"))
    long = r["wake_long_history"]
    rows.append((f"wake, {long['transcript_bytes'] // 1024} KB transcript, ms", str(long["wake_ms"]["median"]),
                 f"read files {long['read_files_ms']['median']}", str(long["ratio"]), "<= 2x"))
    widths = [max(len(row[c]) for row in rows) for c in range(5)]
    return "\n".join("  ".join(row[c].ljust(widths[c]) for c in range(5)) for row in rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--idle-sessions", type=int, default=40)
    parser.add_argument("--wake-rounds", type=int, default=15)
    parser.add_argument("--long-history", type=int, default=100, help="turns of history for the second wake")
    args = parser.parse_args()
    configure_logging("bench", level=logging.WARNING)
    result = asyncio.run(main(args.turns, args.idle_sessions, args.wake_rounds, args.long_history))
    print(table(result))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
