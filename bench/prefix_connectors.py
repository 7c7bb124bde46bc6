"""`make bench-prefix`, second part: what a loaded connector costs the cached prefix.

The `chat_dynamic_tools` workload of bench/prefix.py (GAMMA_DYNAMIC_TOOLS on, Chat Completions, the
scripted model), each session opening with `load_tools({"namespace": "connector:brand"})`, twice:
- without: no connector registered (the load is an error result: the same messages, the same tools);
- with: the example connector's `brand` registered (services/connectors/example), so from the second
  request on the tool list carries its three tools.
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
from services.runtime.app import skills_dir  # noqa: E402
from services.runtime.skills import load_skills  # noqa: E402
from shared import connectors  # noqa: E402
from shared.logging import configure_logging  # noqa: E402
from shared.tokens import TokenCounter  # noqa: E402

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


async def run(with_connector: bool, sessions: int, turns: int, concurrency: int) -> dict[str, Any]:
    recorder = Recorder(ScriptedGamma(load_skills(skills_dir())))
    with tempfile.TemporaryDirectory(prefix="gamma-bench-connectors-") as tmp:
        h = Harness(redis_url(), Path(tmp), recorder, api="chat", dynamic_tools=True)
        await h.client.flushdb()
        if with_connector:
            await connectors.put_connector(h.client, "brand", spec(), max_connectors=32)
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
    out = {k: measure_api(events)[k] for k in KEYS}
    out["median_tool_schema_tokens"] = tool_schema_tokens(recorder.bodies, TokenCounter())
    return out


async def main(sessions: int, turns: int, concurrency: int) -> dict[str, Any]:
    without = await run(False, sessions, turns, concurrency)
    with_ = await run(True, sessions, turns, concurrency)
    ratio = {k: round(with_[k] / without[k], 4) if without[k] else None for k in without}
    return {"benchmark": "prefix_connectors", "sessions": sessions, "turns": turns + 1, "api": "chat",
            "without_connector": without, "with_connector_loaded": with_, "with_over_without": ratio}


def table(result: dict[str, Any]) -> str:
    a, b, r = result["without_connector"], result["with_connector_loaded"], result["with_over_without"]
    rows = [("GAMMA_DYNAMIC_TOOLS on (chat API)", "no connector", "brand loaded", "with / without")]
    rows += [(k, str(a[k]), str(b[k]), str(r[k])) for k in a]
    widths = [max(len(row[c]) for row in rows) for c in range(4)]
    return "\n".join("  ".join(row[c].ljust(widths[c]) for c in range(4)) for row in rows)


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
