"""`make bench-prefix`, third part: the cached prefix on both OpenAI cache regimes (docs/cache.md).

The same workload on gpt-5 (the `prefix` regime: any request whose first >= 1,024 tokens match is
read in 128-token steps) and on gpt-5.6-sol (the `breakpoints` regime: a prefix is read only where
some request wrote a breakpoint exactly at its end; the harness marks the static prefix's and the
variant's ends), for each variant (base, deck-generation, import), without and with a connector
loaded (GAMMA_DYNAMIC_TOOLS on, the example connector `brand` registered and loaded by each session's
first turn). The Responses API, the real runtime worker in this process, the scripted model behind
the real openai client simulating each regime (scripted/prompt_cache.py, scripted/breakpoint_cache.py).

Per run: one session warms the cache, then `--sessions - 1` new ones start on the warm prefix (one
`prompt_cache_key` for the variant: GAMMA_PROMPT_CACHE_KEY_SHARDS=1, the shard a new session meets).
Measured from the runtime's `model_request` events (the usage the simulated API reported):
- within_session_cached_share: cached / input tokens over each session's requests after its first;
- new_session_first_hit: a new session's first request, cached tokens / the head's tokens (tools and
  system prompt, counted as the simulator counts them), mean over the new sessions (target >= 0.9 on
  5.6); cold_first_hit: the same for the warming session (nothing to read);
- cache_write_tokens_per_session and cost_per_session_usd: the catalogue's gpt-5 prices for both
  models (the catalogue has no gpt-5.6 list price; the reference gives 5.6 reads at 10 % of input, as
  gpt-5's), writes at 1.25x input from 5.6 (shared/catalogue/pricing.py);
- cache_break_alarms: the runtime's `model_cache_miss` events by reason (model/cache_watch.py).
Baselines, the same runs as the requests were sent before breakpoints (`*_before`: the session id as
`prompt_cache_key`, and on 5.6 the system prompt as `instructions` with no breakpoint): what the
breakpoints and the shared key change.
Writes bench/results/prefix_regimes.json. Not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.prefix import Harness, Recorder, call, done, inject_before, redis_url, script, turn_text  # noqa: E402
from scripted.breakpoint_cache import head_tokens  # noqa: E402
from scripted.gamma import ScriptedGamma  # noqa: E402
from scripted.transport import scripted_transport  # noqa: E402
from services.connectors.example.library import spec  # noqa: E402
from services.proxy.rows import SessionRow  # noqa: E402
from services.runtime.app import skills_dir  # noqa: E402
from services.runtime.model import responses_api  # noqa: E402
from services.runtime.skillset.prompt import VARIANTS  # noqa: E402
from services.runtime.skillset.skills import load_skills  # noqa: E402
from shared.catalogue import catalogue  # noqa: E402
from shared.catalogue.pricing import Pricer, cost_usd  # noqa: E402
from shared.contracts.http import ModelConfig  # noqa: E402
from shared.mcp import connectors  # noqa: E402
from shared.redis import keys  # noqa: E402
from shared.telemetry.logging import configure_logging  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "prefix_regimes.json"
MODELS = {"prefix": "gpt-5", "breakpoints": "gpt-5.6-sol"}
# column -> (regime, True: the requests this harness sends; False: no breakpoints and a key per session)
COLUMNS = {"prefix": ("prefix", True), "breakpoints": ("breakpoints", True),
           "prefix_before": ("prefix", False), "breakpoints_before": ("breakpoints", False)}
PRICED_AS = "gpt-5"  # both runs at gpt-5's list prices (see the module doc)


def pricer() -> Pricer:
    cat = catalogue()
    base = Pricer(cat).price(PRICED_AS)
    assert base is not None
    return Pricer(cat, {MODELS["breakpoints"]: base.model_copy(update={"cache_write": None})})


async def session(h: Harness, sid: str, i: int, turns: int, model: str, variant: str, connector: bool) -> None:
    now = int(time.time() * 1000)
    row = SessionRow(id=sid, owner="bench", variant=variant, model=ModelConfig(name=model),  # type: ignore[arg-type]
                     created_at=now, updated_at=now)
    await h.client.hset(keys.session_row(sid), mapping=row.to_hash())  # type: ignore[arg-type]
    await h.wake(sid)
    if connector:
        await h.turn(sid, script({"tool_calls": [call("load_tools", namespace="connector:brand")]}, done("loaded")))
    for t in range(turns):
        if t:
            await inject_before(h, sid, i, t)
        await h.turn(sid, turn_text(i, t))


@contextmanager
def sent_as_before(before: bool) -> Iterator[None]:
    """The request bodies of the harness before breakpoints (the system prompt as `instructions` on
    every model), for the baseline columns."""
    saved = responses_api.uses_breakpoints
    if before:
        responses_api.uses_breakpoints = lambda settings: False  # type: ignore[assignment]
    try:
        yield
    finally:
        responses_api.uses_breakpoints = saved  # type: ignore[assignment]


async def run(column: str, variant: str, connector: bool, sessions: int, turns: int,
              concurrency: int) -> dict[str, Any]:
    regime, now = COLUMNS[column]
    model = MODELS[regime]
    recorder = Recorder(ScriptedGamma(load_skills(skills_dir())))
    with tempfile.TemporaryDirectory(prefix="gamma-bench-regimes-") as tmp, capture_logs() as logs, \
            sent_as_before(not now):
        h = Harness(redis_url(), Path(tmp), recorder, api="responses", dynamic_tools=connector,
                    GAMMA_PROMPT_CACHE_KEY_SHARDS=1, GAMMA_PROMPT_CACHE_KEY="shared" if now else "session")
        await h.client.flushdb()
        if connector:
            await connectors.put_connector(h.client, "brand", spec(), max_connectors=32)
        transport = scripted_transport(h.worker.model_client)
        assert transport is not None
        transport.requests = deque(maxlen=100_000)  # the first request's head is read below
        await h.start()
        gate = asyncio.Semaphore(concurrency)
        sids = [f"{column[:2]}{int(now)}{variant[:3]}{int(connector)}-{i:02d}" for i in range(sessions)]

        async def one(i: int) -> None:
            async with gate:
                await session(h, sids[i], i, turns, model, variant, connector)

        try:
            await one(0)  # warms the cache
            head = head_tokens("responses", transport.requests[0][1])  # the first request: before any load
            transport.requests.clear()
            await asyncio.gather(*(one(i) for i in range(1, sessions)))
            events = {sid: await h.model_requests(sid) for sid in sids}
        finally:
            await h.stop()
    alarms = Counter(str(e.get("diverged")) for e in logs if e.get("event") == "model_cache_miss")
    return measure(events, sids, head, model, alarms)


def measure(events: dict[str, list[dict[str, Any]]], sids: list[str], head: int, model: str,
            alarms: Counter[str]) -> dict[str, Any]:
    price = pricer().price(model)
    assert price is not None
    later = [r for sid in sids for r in events[sid][1:]]
    firsts = [events[sid][0] for sid in sids]
    new_hits = [min(1.0, r["cached_tokens"] / head) for r in firsts[1:]]
    writes = [sum(r["cache_write_tokens"] for r in events[sid]) for sid in sids]
    costs = [sum(cost_usd(price, r["input_tokens"], r["cached_tokens"], r["output_tokens"], r["cache_write_tokens"])
                 for r in events[sid]) for sid in sids]
    later_in = sum(r["input_tokens"] for r in later)
    return {
        "requests_per_session": round(statistics.fmean(len(events[s]) for s in sids), 1),
        "head_tokens": head,
        "within_session_cached_share": round(sum(r["cached_tokens"] for r in later) / later_in, 4) if later_in else 0.0,
        "new_session_first_hit": round(statistics.fmean(new_hits), 4) if new_hits else 0.0,
        "cold_first_hit": round(min(1.0, firsts[0]["cached_tokens"] / head), 4),
        "cache_write_tokens_per_session": int(statistics.fmean(writes)),
        "cost_per_session_usd": round(statistics.fmean(costs), 5),
        "cache_break_alarms": dict(sorted(alarms.items())),
    }


async def main(sessions: int, turns: int, concurrency: int) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for variant in VARIANTS:
        for connector in (False, True):
            label = f"{variant}{' + connector' if connector else ''}"
            runs[label] = {column: await run(column, variant, connector, sessions, turns, concurrency)
                           for column in COLUMNS}
    return {"benchmark": "prefix_regimes", "api": "responses", "sessions": sessions, "turns": turns,
            "models": MODELS, "columns": {c: {"regime": r, "as_sent": "now" if n else "before"}
                                          for c, (r, n) in COLUMNS.items()}, "priced_as": PRICED_AS, "targets": {"breakpoints.new_session_first_hit": 0.9},
            "runs": runs}


KEYS = ("requests_per_session", "head_tokens", "within_session_cached_share", "new_session_first_hit",
        "cold_first_hit", "cache_write_tokens_per_session", "cost_per_session_usd", "cache_break_alarms")


def table(result: dict[str, Any]) -> str:
    out = []
    for label, by in result["runs"].items():
        rows = [(label, *(f"{c} ({MODELS[COLUMNS[c][0]]})" for c in by))]
        rows += [(k, *(json.dumps(by[r][k]) for r in by)) for k in KEYS]
        widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
        out.append("\n".join("  ".join(row[c].ljust(widths[c]) for c in range(len(row))) for row in rows))
    return "\n\n".join(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    configure_logging("bench", level=logging.WARNING)
    result = asyncio.run(main(args.sessions, args.turns, args.concurrency))
    print(table(result))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
