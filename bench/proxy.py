"""Proxy benchmark (`make bench-proxy`): not a test, a measurement.

1. Dormant `GET /sessions/{id}/preview` through the real proxy (auth, session row and liveness from
   Redis, transcript/state/todo from disk, display filtering, response model) against a bare FastAPI
   handler that reads the same three files into the same body: p50 / p99 and their ratio (target <= 1.5x).
2. Live `POST /sessions/{id}/ui/sync` round trips per second: a pycrdt client sends one small
   incremental update at a time to a session the real runtime holds (proxy -> inbox -> runtime applies,
   persists state.json, replies -> proxy answers).

Runs the five services as processes against a redis-server of its own, prints a table and writes
bench/results/proxy.json.
"""

from __future__ import annotations

import base64
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
from pycrdt import Doc, Map

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.stack import free_port  # noqa: E402
from shared.ui.uidoc import ROOT as UI_ROOT  # noqa: E402
from tests.support.redis_server import start_redis_server  # noqa: E402
from tests.support.stack import API_TOKEN, Stack  # noqa: E402

HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}
PREVIEW_REQUESTS = 1000
WARMUP = 100
UI_SYNC_SECONDS = 8.0
TRANSCRIPT_TURNS = 60

BARE_APP = textwrap.dedent('''
    """The baseline: one FastAPI handler that reads the same files and builds the same body (the
    proxy's own display filter), without auth, the session row, liveness or response models."""
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from services.proxy.dormant.preview import display_entries, read_todo, read_transcript, read_ui
    from shared.storage.disk import session_paths

    data_dir = Path(sys.argv[1])
    app = FastAPI()

    @app.get("/bare/{sid}")
    async def bare(sid: str):
        paths = session_paths(data_dir, sid)
        return JSONResponse({"status": "dormant", "transcript": display_entries(read_transcript(paths)),
                             "ui": read_ui(paths), "todo": read_todo(paths).model_dump()})

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
''')


def write_transcript(path: Path, turns: int) -> int:
    """A realistic session: per turn a client_view injection, the prompt, an assistant text with a
    tool call, its result, and the message_user that ends the turn."""
    ts = "2026-01-01T00:00:00.000Z"
    lines: list[dict[str, Any]] = [{"type": "session", "id": "h", "parentId": None, "timestamp": ts, "version": 3, "cwd": "workspace"}]
    parent = "h"
    for t in range(turns):
        for kind, body in [
            ("custom_message", {"customType": "gamma.client_view", "content": f"<client_view>card {t}</client_view>",
                                "display": False, "details": {"trusted": True, "injectionType": "client_view"}}),
            ("message", {"message": {"role": "user", "content": f"Please revise card {t}: " + "detail " * 30}}),
            ("message", {"message": {"role": "assistant", "stopReason": "toolUse", "content": [
                {"type": "text", "text": f"Revising card {t}. " + "reasoning " * 40},
                {"type": "toolCall", "id": f"call_{t}", "name": "edit", "arguments": {"path": "deck.json", "old": "a" * 200, "new": "b" * 200}}]}}),
            ("message", {"message": {"role": "toolResult", "toolCallId": f"call_{t}", "toolName": "edit",
                                     "content": [{"type": "text", "text": "ok " * 100}]}}),
            ("message", {"message": {"role": "assistant", "stopReason": "toolUse", "content": [
                {"type": "toolCall", "id": f"mu_{t}", "name": "message_user",
                 "arguments": {"message": f"Card {t} is revised.", "blockOnUser": True}}]}}),
        ]:
            entry_id = f"e{len(lines)}"
            lines.append({"type": kind, "id": entry_id, "parentId": parent, "timestamp": ts, **body})
            parent = entry_id
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return len(lines)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def timed_get(client: httpx.Client, url: str) -> float:
    start = time.perf_counter()
    resp = client.get(url)
    elapsed = (time.perf_counter() - start) * 1000
    resp.raise_for_status()
    return elapsed


def bench_preview(stack: Stack, sid: str, bare_url: str) -> dict[str, Any]:
    proxy_url = f"{stack.url()}/sessions/{sid}/preview"
    with httpx.Client(headers=HEADERS, timeout=30) as client:
        for _ in range(WARMUP):
            timed_get(client, proxy_url)
            timed_get(client, bare_url)
        proxy_ms: list[float] = []
        bare_ms: list[float] = []
        # Alternating request by request, so drift (other load on the box) hits both sides alike.
        for _ in range(PREVIEW_REQUESTS):
            proxy_ms.append(timed_get(client, proxy_url))
            bare_ms.append(timed_get(client, bare_url))
        preview_bytes = len(client.get(proxy_url).content)
        bare_bytes = len(client.get(bare_url).content)
        assert client.get(f"{stack.url()}/sessions/{sid}").json()["status"] == "dormant"
    out = {
        "requests_each": len(proxy_ms),
        "proxy_p50_ms": statistics.median(proxy_ms), "proxy_p99_ms": percentile(proxy_ms, 99),
        "bare_p50_ms": statistics.median(bare_ms), "bare_p99_ms": percentile(bare_ms, 99),
        "proxy_response_bytes": preview_bytes, "bare_response_bytes": bare_bytes,
    }
    out["ratio_p50"] = out["proxy_p50_ms"] / out["bare_p50_ms"]
    out["ratio_p99"] = out["proxy_p99_ms"] / out["bare_p99_ms"]
    return out


def bench_ui_sync(stack: Stack) -> dict[str, Any]:
    with httpx.Client(base_url=stack.url(), headers=HEADERS, timeout=30) as client:
        sid = client.post("/sessions").json()["id"]
        client.post(f"/sessions/{sid}/messages", json={"message": "wake up for the benchmark"}).raise_for_status()
        deadline = time.time() + 60
        while client.get(f"/sessions/{sid}").json()["status"] != "live":
            if time.time() > deadline:
                raise RuntimeError("the session never became live")
            time.sleep(0.2)
        doc: Doc = Doc()
        doc.get(UI_ROOT, type=Map)
        doc.apply_update(base64.b64decode(client.get(f"/sessions/{sid}/ui").json()["update"]))
        root = doc.get(UI_ROOT, type=Map)
        latencies: list[float] = []
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < UI_SYNC_SECONDS:
            before = doc.get_state()
            root["mobile"]["view"] = "files" if n % 2 == 0 else "chat"
            update = base64.b64encode(doc.get_update(before)).decode()
            t0 = time.perf_counter()
            resp = client.post(f"/sessions/{sid}/ui/sync", json={"update": update})
            latencies.append((time.perf_counter() - t0) * 1000)
            resp.raise_for_status()
            n += 1
        elapsed = time.perf_counter() - start
        final = client.get(f"/sessions/{sid}/ui").json()["snapshot"]["mobile"]["view"]
        assert final == ("files" if (n - 1) % 2 == 0 else "chat"), final
    return {"round_trips": n, "seconds": elapsed, "round_trips_per_s": n / elapsed,
            "p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 99)}


def main() -> None:
    # A private redis-server: nothing else's keys, nothing of ours left in a shared one.
    redis_base, redis_proc = start_redis_server()
    data_dir = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    stack = Stack(redis_url=redis_base + "/0", data_dir=data_dir)
    bare_port = free_port()
    bare_script = data_dir / "bare_app.py"
    bare_script.write_text(BARE_APP)
    bare = subprocess.Popen([sys.executable, str(bare_script), str(data_dir), str(bare_port), str(ROOT)], cwd=ROOT)
    try:
        stack.start()
        with httpx.Client(base_url=stack.url(), headers=HEADERS, timeout=30) as client:
            sid = client.post("/sessions").json()["id"]
            snapshot = {"panes": [{"id": "p1", "tabIds": [f"t{i}" for i in range(6)]}],
                        "tabs": {f"t{i}": {"id": f"t{i}", "ari": f"gamma:file:d1#card_{i}", "title": f"Card {i}"} for i in range(6)},
                        "activeTabByPane": {"p1": "t0"}, "expandedDirs": ["uploads/", "exports/"]}
            client.post(f"/sessions/{sid}/ui/sync", json={"update": "AAA=", "snapshot": snapshot}).raise_for_status()
        root = data_dir / "sessions" / sid
        entries = write_transcript(root / "transcript.jsonl", TRANSCRIPT_TURNS)
        (root / "todo.json").write_text(json.dumps({"revision": 4, "items": [
            {"id": str(i), "content": f"Task {i}", "status": "complete" if i < 3 else "pending"} for i in range(8)]}))
        bare_url = f"http://127.0.0.1:{bare_port}/bare/{sid}"
        deadline = time.time() + 30
        while True:
            try:
                httpx.get(bare_url, timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        preview = bench_preview(stack, sid, bare_url)
        preview["transcript_entries"] = entries
        preview["transcript_bytes"] = (root / "transcript.jsonl").stat().st_size
        ui_sync = bench_ui_sync(stack)
    finally:
        bare.terminate()
        bare.wait(timeout=10)
        stack.stop()
        redis_proc.terminate()
        redis_proc.wait(timeout=10)

    result = {"preview": preview, "ui_sync": ui_sync, "host": {"python": platform.python_version(),
              "cpus": os.cpu_count(), "machine": platform.machine()}, "ts": int(time.time())}
    out = ROOT / "bench" / "results" / "proxy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    p = preview
    print(f"dormant /preview ({p['transcript_entries']} transcript entries, {p['transcript_bytes']} bytes on disk; "
          f"{p['requests_each']} requests each, sequential)")
    print(f"  {'':24}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"  {'proxy /preview':24}{p['proxy_p50_ms']:>10.2f}{p['proxy_p99_ms']:>10.2f}")
    print(f"  {'bare FastAPI handler':24}{p['bare_p50_ms']:>10.2f}{p['bare_p99_ms']:>10.2f}")
    verdict = "meets" if p["ratio_p50"] <= 1.5 else "misses"
    print(f"  {'ratio':24}{p['ratio_p50']:>9.2f}x{p['ratio_p99']:>9.2f}x   ({verdict} the <= 1.5x target at p50)")
    u = ui_sync
    print(f"live /ui/sync (proxy -> inbox -> runtime -> reply), one client, {u['seconds']:.1f} s")
    print(f"  {u['round_trips_per_s']:.0f} round trips/s   p50 {u['p50_ms']:.2f} ms   p99 {u['p99_ms']:.2f} ms")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
