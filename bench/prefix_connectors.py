"""`make bench-prefix`, second part: what a loaded connector costs the cached prefix.

The `chat_dynamic_tools` workload of bench/prefix.py (GAMMA_DYNAMIC_TOOLS on, Chat Completions, the
scripted model), each session opening with `load_tools({"namespace": "connector:brand"})`, twice:
- without: no connector registered (the load is an error result: the same messages, the same tools);
- with: the example connector's `brand` registered (services/connectors/example), so from the second
  request on the tool list carries its three tools;
- with MCP: an MCP server registered as `brand` the way `PUT /connectors/brand/mcp` does it (its tools
  listed with the mcp SDK, services/notifications/mcp_routes.py `listed`): the `mcp` SDK's own server
  (tests/support/mcp_server.py, 2026-07-28, four tools), started by the bench.
Measured from the runtime's `model_request` events and the recorded bodies, side by side: the
static-prefix identity, shared and cached shares, input tokens and the tool schemas' tokens.
Writes bench/results/prefix_connectors.json. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.prefix import (  # noqa: E402
    Harness,
    Recorder,
    call,
    done,
    inject_before,
    measure_api,
    redis_url,
    script,
    tool_schema_tokens,
    turn_text,
)
from scripted.gamma import ScriptedGamma  # noqa: E402
from services.connectors.example.library import spec  # noqa: E402
from services.notifications.mcp_routes import listed  # noqa: E402
from services.runtime.app import skills_dir  # noqa: E402
from services.runtime.skillset.skills import load_skills  # noqa: E402
from shared.contracts.mcp import McpConnectorSpec  # noqa: E402
from shared.history.tokens import TokenCounter  # noqa: E402
from shared.mcp import connectors  # noqa: E402
from shared.telemetry.logging import configure_logging  # noqa: E402
from tests.support.mcp_servers import start_python  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "prefix_connectors.json"
KEYS = ("requests", "static_prefix_identical_ratio", "median_shared_prefix_ratio", "median_cached_share",
        "cached_share_total", "median_input_tokens")


async def session(h: Harness, i: int, turns: int) -> None:
    sid = f"bench{i:03d}"
    await h.wake(sid)
    await h.turn(sid, script({"tool_calls": [call("load_tools", namespace="connector:brand")]}, done("loaded")))
    for t in range(turns):
        if t:
            await inject_before(h, sid, i, t)
        await h.turn(sid, turn_text(i, t))


async def register_mcp(h: Harness, url: str) -> None:
    body = McpConnectorSpec(url=url, description="An MCP server's tools, registered as brand.")
    got = await listed("brand", body, None, h.settings.notifications, "operator")
    assert isinstance(got, tuple), got.body
    await connectors.put_connector(h.client, "brand", got[0], max_connectors=32, mcp=got[1])


async def run(kind: str, sessions: int, turns: int, concurrency: int) -> dict[str, Any]:
    recorder = Recorder(ScriptedGamma(load_skills(skills_dir())))
    with tempfile.TemporaryDirectory(prefix="gamma-bench-connectors-") as tmp:
        h = Harness(redis_url(), Path(tmp), recorder, api="chat", dynamic_tools=True,
                    overrides={"GAMMA_MCP_ALLOWED_HOSTS": "127.0.0.1"})
        await h.client.flushdb()
        server = start_python(Path(tmp)) if kind == "mcp" else None
        if kind == "connector":
            await connectors.put_connector(h.client, "brand", spec(), max_connectors=32)
        if server is not None:
            await register_mcp(h, server.url)
        await h.start()
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with gate:
                await session(h, i, turns)

        try:
            await asyncio.gather(*(one(i) for i in range(sessions)))
            events = {f"bench{i:03d}": await h.model_requests(f"bench{i:03d}") for i in range(sessions)}
        finally:
            await h.stop()
            if server is not None:
                server.stop()
    out = {k: measure_api(events)[k] for k in KEYS}
    out["median_tool_schema_tokens"] = tool_schema_tokens(recorder.bodies, TokenCounter())
    return out


async def main(sessions: int, turns: int, concurrency: int) -> dict[str, Any]:
    without = await run("none", sessions, turns, concurrency)
    with_ = await run("connector", sessions, turns, concurrency)
    mcp = await run("mcp", sessions, turns, concurrency)
    ratio = {k: round(with_[k] / without[k], 4) if without[k] else None for k in without}
    mcp_ratio = {k: round(mcp[k] / with_[k], 4) if with_[k] else None for k in with_}
    return {"benchmark": "prefix_connectors", "sessions": sessions, "turns": turns + 1, "api": "chat",
            "without_connector": without, "with_connector_loaded": with_, "with_mcp_connector_loaded": mcp,
            "with_over_without": ratio, "mcp_over_connector": mcp_ratio}


def table(result: dict[str, Any]) -> str:
    a, b, m = result["without_connector"], result["with_connector_loaded"], result["with_mcp_connector_loaded"]
    r, mr = result["with_over_without"], result["mcp_over_connector"]
    rows = [("GAMMA_DYNAMIC_TOOLS on (chat API)", "no connector", "brand loaded", "MCP loaded", "brand / none",
             "MCP / brand")]
    rows += [(k, str(a[k]), str(b[k]), str(m[k]), str(r[k]), str(mr[k])) for k in a]
    widths = [max(len(row[c]) for row in rows) for c in range(6)]
    return "\n".join("  ".join(row[c].ljust(widths[c]) for c in range(6)) for row in rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    configure_logging("bench", level=logging.WARNING)
    result = asyncio.run(main(args.sessions, args.turns, args.concurrency))
    print(table(result))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
