"""The runtime's CPU per streamed token, model side only (docs/architecture.md "Streaming at scale"): `python bench/stream_micro.py`.

N concurrent model calls (the bench-stream answer: 400 text tokens at 80 tokens/s, 400 ms to the
first token, one message_user call) read by the runtime's own stream reader (ResponsesApi.consume /
ChatApi.consume, each token emitted as an AgentEvent into a counter), in this process; CPU seconds of
this process per 1,000 tokens, for each way the model is reached:

- `inproc`: the scripted model in this process behind the openai client (ScriptedTransport: the test
  default; its CPU is this process's),
- `server`: the scripted model as its own process (scripted/server.py), reached
  over HTTP by the openai client's default httpx backend (the server's CPU is not counted: a
  provider's is not ours),
- `server-aiohttp`: the same through `openai.DefaultAioHttpClient` (package httpx-aiohttp), if installed.

The event loop is uvloop (as the services run under uvicorn) unless --asyncio. Writes
bench/results/stream_micro.json with the load average; the Outbox, Redis and the proxy are not in
this measure (bench-stream has the whole path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
import redis.asyncio as aioredis
from openai import AsyncOpenAI

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripted.pacing import Timing  # noqa: E402
from scripted.settings import ScriptedSettings  # noqa: E402
from scripted.transport import scripted_client  # noqa: E402
from services.runtime.engine.types import AgentEvent  # noqa: E402
from services.runtime.live.sender import EventSender  # noqa: E402
from services.runtime.model.chat_api import ChatApi  # noqa: E402
from services.runtime.model.responses_api import ResponsesApi  # noqa: E402
from services.stack import free_port  # noqa: E402
from shared.contracts.records.messages import AssistantMessage  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "stream_micro.json"
TOOL = {"name": "message_user", "arguments": {"message": "Done: the answer is above.", "blockOnUser": True}}
HISTORY = [0]  # earlier tool calls in every request (--history)
ENV = {"GAMMA_SCRIPTED_PROFILE": "fast_gpt", "GAMMA_SCRIPTED_STAMP": "true"}


def earlier(api: str, turns: int) -> list[dict[str, Any]]:
    """`turns` earlier tool calls with their results (~1 KB each): a session's history, which the model API
    double checks on every request (scripted/strict/)."""
    out: list[dict[str, Any]] = []
    for i in range(turns):
        args, result = json.dumps({"path": f"file{i}.txt"}), "line of a file\n" * 60
        if api == "responses":
            out += [{"type": "function_call", "call_id": f"c{i}", "name": "read", "arguments": args},
                    {"type": "function_call_output", "call_id": f"c{i}", "output": result}]
        else:
            out += [{"role": "assistant", "content": None, "tool_calls": [
                        {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": args}}]},
                    {"role": "tool", "tool_call_id": f"c{i}", "content": result}]
    return out


def body(api: str, tokens: int, history: int = 0) -> dict[str, Any]:
    script = "script:" + json.dumps([{"content": "@ts@" * tokens, "tool_calls": [TOOL]}])
    params = {"type": "object", "properties": {"message": {"type": "string"}, "blockOnUser": {"type": "boolean"}}}
    before = [{"role": "user", "content": "start"}, *earlier(api, history)] if history else []
    if api == "responses":
        return {"model": "gpt-4.1-mini", "input": [*before, {"role": "user", "content": script}], "stream": True,
                "store": False,
                "tools": [{"type": "function", "name": "message_user", "description": "", "parameters": params,
                           "strict": False}]}
    return {"model": "gpt-4.1-mini", "messages": [*before, {"role": "user", "content": script}], "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [{"type": "function", "function": {"name": "message_user", "parameters": params}}]}


async def run_calls(client: AsyncOpenAI, api: str, sessions: int, tokens: int, gate_ms: float) -> dict[str, Any]:
    adapter = ResponsesApi() if api == "responses" else ChatApi()
    # The worker's EventSender as the streams' read gate (nothing is queued: it only opens the gate).
    gate = EventSender(aioredis.Redis(), gate_ms / 1000) if gate_ms > 0 else None
    deltas = 0

    async def emit(event: AgentEvent) -> None:
        nonlocal deltas
        if event.type == "message_update":
            deltas += 1

    async def one(i: int) -> None:
        await asyncio.sleep(2.0 * i / sessions)  # the bench's ramp
        msg = await adapter.consume(client, body(api, tokens, HISTORY[0]), AssistantMessage(model="gpt-4.1-mini", api=api), emit,
                                    asyncio.Event(), gate)
        assert msg.tool_calls(), msg

    cpu0, t0 = time.process_time(), time.monotonic()
    await asyncio.gather(*(one(i) for i in range(sessions)))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    total = sessions * tokens
    return {"tokens": total, "emits": deltas, "cpu_s": round(cpu, 3), "wall_s": round(wall, 2),
            "cpu_us_per_token": round(cpu * 1e6 / total, 2), "tokens_per_s": round(total / wall, 1)}


def make_client(mode: str, base_url: str | None) -> AsyncOpenAI:
    if mode == "inproc":
        from scripted.gamma import ScriptedGamma
        from services.runtime.skillset.paths import skills_dir
        from services.runtime.skillset.skills import load_skills
        os.environ.update(ENV)
        return scripted_client(ScriptedGamma(load_skills(skills_dir())), Timing.from_settings(ScriptedSettings()))
    limits = httpx2.Limits(max_connections=2000, max_keepalive_connections=2000)
    if mode == "server-aiohttp":
        from openai import DefaultAioHttpClient
        return AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0, http_client=DefaultAioHttpClient())
    return AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0,
                       http_client=httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(600, connect=30)))


def measure(mode: str, api: str, sessions: int, tokens: int, use_uvloop: bool, gate_ms: float) -> dict[str, Any]:
    server = None
    base_url = None
    if mode != "inproc":
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "scripted.server", "--port", str(port)],
                                  env={**os.environ, **ENV, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
        base_url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.post(base_url + "/nothing", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.2)

    async def go() -> dict[str, Any]:
        client = make_client(mode, base_url)
        try:
            await run_calls(client, api, min(sessions, 20), 40, gate_ms)  # warm-up: imports, connections, caches
            return await run_calls(client, api, sessions, tokens, gate_ms)
        finally:
            await client.close()
    try:
        if use_uvloop:
            import uvloop
            return uvloop.run(go())
        return asyncio.run(go())
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="inproc,server")
    parser.add_argument("--api", choices=["responses", "chat"], default="responses")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--asyncio", action="store_true", help="the default asyncio loop instead of uvloop")
    parser.add_argument("--gate-ms", type=float, default=0.0,
                        help="read the streams through an EventSender read gate of this period (0: every chunk)")
    parser.add_argument("--history", type=int, default=0,
                        help="earlier tool calls (~1 KB each) in every request: a session's history")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    print(f"{'mode':16} {'CPU us/token':>12} {'tokens/s':>10} {'wall s':>7} {'load 1m':>8}")
    HISTORY[0] = args.history
    for mode in args.modes.split(","):
        row = {"mode": mode, "api": args.api, "sessions": args.sessions, "uvloop": not args.asyncio,
               "gate_ms": args.gate_ms,
               **measure(mode, args.api, args.sessions, args.tokens, not args.asyncio, args.gate_ms),
               "load_average": [round(x, 2) for x in os.getloadavg()]}
        rows.append(row)
        print(f"{mode:16} {row['cpu_us_per_token']:>12} {row['tokens_per_s']:>10} {row['wall_s']:>7} "
              f"{row['load_average'][0]:>8}", flush=True)
    base = rows[0]["cpu_us_per_token"]
    for row in rows:
        row["cpu_ratio_vs_first"] = round(row["cpu_us_per_token"] / base, 3) if base else None
    previous = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    previous["runs"].append({"label": args.label, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "rows": rows})
    args.out.write_text(json.dumps(previous, indent=2) + "\n")


if __name__ == "__main__":
    main()
