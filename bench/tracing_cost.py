"""What tracing costs on the paths it touches: `python bench/tracing_cost.py`.

Per operation, microseconds (best of 5 rounds), in a fresh process per mode (OpenTelemetry has one
global provider per process):

- `off`: `configure_tracing` without an OTLP endpoint (the default: ALWAYS_OFF, non-recording spans);
- `on`: with an endpoint (every span recorded and queued for the exporter; the endpoint is a closed
  local port and the batch delay long, so no export happens inside the measure).

Operations: an inbox message's fields (`entry_fields`: the traceparent filled in, then the JSON)
beside the bare JSON; the runtime's span around one inbox entry; an events stream entry (`entry`,
with the traceparent only when recorded) beside the bare JSON; one FastAPI request through ASGI with
`app_telemetry()` beside FastAPI's default telemetry (what every service ran before). Writes
bench/results/tracing_cost.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
N = 20_000
REQUESTS = 2_000


def best_us(fn: Callable[[], Any], n: int = N) -> float:
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - start) / n * 1e6)
    return round(min(rounds), 3)


async def request_us(telemetry: dict[str, Any] | None) -> float:
    import httpx
    from fastapi import FastAPI

    app = FastAPI(telemetry=telemetry) if telemetry is not None else FastAPI()

    @app.get("/sessions/{sid}")
    async def one(sid: str) -> dict[str, str]:
        return {"id": sid}

    rounds = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://b") as client:
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(REQUESTS):
                await client.get("/sessions/s1")
            rounds.append((time.perf_counter() - start) / REQUESTS * 1e6)
    return round(min(rounds), 1)


def measure() -> dict[str, float]:
    from opentelemetry import trace

    from services.runtime.inbox.dispatcher import processing
    from services.runtime.live.events import entry
    from shared.contracts.streams.events import SessionEvent
    from shared.contracts.streams.inbox import UserPrompt
    from shared.streams.inbox import InboxEntry, entry_fields
    from shared.telemetry.tracing import app_telemetry, configure_tracing, recorded_traceparent

    configure_tracing("bench")
    prompt = UserPrompt(session_id="s_bench", message="Make a deck about the ocean.")
    tracer = trace.get_tracer("bench")
    out: dict[str, float] = {}
    with tracer.start_as_current_span("request") as span:
        out["inbox_fields_us"] = best_us(lambda: entry_fields(prompt))
        out["inbox_json_us"] = best_us(lambda: prompt.model_dump_json())
        parent = recorded_traceparent(span)
    traced = InboxEntry(session_id="s_bench", entry_id="1-0", message=entry_fields_message(prompt, parent))

    def handle() -> None:
        with processing(traced):
            pass

    out["inbox_entry_span_us"] = best_us(handle)
    event = SessionEvent(type="message_update", session_id="s_bench", data={"delta": "token"}, run_id="run_1")
    out["event_entry_us"] = best_us(lambda: entry(event, parent))
    out["event_json_us"] = best_us(lambda: {"data": event.model_dump_json()})
    out["request_app_telemetry_us"] = asyncio.run(request_us(dict(app_telemetry())))
    out["request_fastapi_default_us"] = asyncio.run(request_us(None))
    return out


def entry_fields_message(prompt: Any, parent: str | None) -> Any:
    return prompt.model_copy(update={"traceparent": parent}) if parent else prompt


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(measure()))
        return
    results: dict[str, dict[str, float]] = {}
    for mode in ("off", "on"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        if mode == "on":
            env.update(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_BSP_SCHEDULE_DELAY="600000",
                       OTEL_BSP_MAX_QUEUE_SIZE="1000000")
        done = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                              check=True, timeout=600)
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    names = list(results["off"])
    print(f"{'operation':32} {'off':>10} {'on':>10}")
    for name in names:
        print(f"{name:32} {results['off'][name]:>10} {results['on'][name]:>10}")
    load = os.getloadavg()[0]
    out = ROOT / "bench" / "results" / "tracing_cost.json"
    out.write_text(json.dumps({"results": results, "loadavg_1m": load}, indent=2) + "\n")
    print(f"wrote {out} (load average {load:.2f})")


if __name__ == "__main__":
    main()
