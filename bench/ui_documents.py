"""UI documents under load (docs/architecture.md "Limits on hostile input"), against the real five services:

- one big Yjs update of N separately inserted items (prepended one by one: every item its own block);
- runtime CPU (from /proc) and wall time per small sync after it;
- another session's prompt round trip, quiet and while the big document is synced over and over;
- bytes per `ui_update` event in Redis.

    PYTHONPATH=$PWD REDIS_URL=redis://127.0.0.1:6395/0 python bench/ui_documents.py --items 20000
Run it with PYTHONPATH pointing at another checkout to measure that one (the services start from the
checkout that holds the imported tests.support.stack).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import redis
from pycrdt import Doc, Map

from shared.redis import keys
from tests.support.stack import API_TOKEN, Stack

HEADERS = {"Authorization": f"Bearer {API_TOKEN}"}


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settled_cpu_s(pid: int) -> float:
    """The runtime's CPU once it has stopped working (it may go on after the proxy gave up waiting)."""
    last = cpu_s(pid)
    while True:
        time.sleep(0.3)
        now = cpu_s(pid)
        if now - last < 0.02:
            return now
        last = now


def seeded(api: httpx.Client, sid: str) -> Doc:
    for _ in range(20):
        try:
            resp = api.get(f"/sessions/{sid}/ui")
        except httpx.HTTPError:
            continue
        if resp.status_code == 200:
            doc: Doc = Doc()
            doc.get("state", type=Map)
            doc.apply_update(base64.b64decode(resp.json()["update"]))
            return doc
    raise AssertionError("GET /ui never answered 200")


def post_sync(api: httpx.Client, sid: str, update: bytes) -> int:
    try:
        return sync(api, sid, update).status_code
    except httpx.HTTPError:
        return 0  # the proxy dropped the connection (a baseline tree without the timeouts)


def prepend_items(doc: Doc, n: int) -> bytes:
    before = doc.get_state()
    dirs = doc.get("state", type=Map)["expandedDirs"]
    for i in range(n):
        with doc.transaction():
            dirs.insert(0, f"d{i}/")
    return bytes(doc.get_update(before))


def sync(api: httpx.Client, sid: str, update: bytes) -> httpx.Response:
    return api.post(f"/sessions/{sid}/ui/sync", json={"update": base64.b64encode(update).decode()})


def prompt_rtt(api: httpx.Client, r: redis.Redis, sid: str, text: str = "hello") -> float:
    """POST a prompt, wait for its run's agent_end on the session's events stream."""
    last = r.xrevrange(keys.events(sid), count=1)
    cursor = last[0][0] if last else "0"
    start = time.perf_counter()
    assert api.post(f"/sessions/{sid}/messages", json={"message": text}).status_code == 202
    while time.perf_counter() - start < 60:
        got = r.xread({keys.events(sid): cursor}, block=2000, count=100)  # under redis-py's 5 s socket timeout
        for entry_id, fields in got[0][1] if got else ():
            cursor = entry_id
            if json.loads(fields[b"data"]).get("type") == "agent_end":
                return time.perf_counter() - start
    raise AssertionError(f"no agent_end for {sid} within 60 s")


def ui_event_sizes(r: redis.Redis, sid: str) -> list[int]:
    return [len(f[b"data"]) for _, f in r.xrange(keys.events(sid)) if json.loads(f[b"data"])["type"] == "ui_update"]


def run(stack: Stack, items: int, small_syncs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"items": items}
    r = redis.Redis.from_url(stack.redis_url)
    runtime_pid = stack.procs["runtime"].pid
    with httpx.Client(base_url=stack.url(), headers=HEADERS, timeout=120) as api:
        a, b = (str(api.post("/sessions").json()["id"]) for _ in range(2))
        for sid in (a, b):
            prompt_rtt(api, r, sid, "wake up")
        out["prompt_rtt_quiet_s"] = statistics.median(prompt_rtt(api, r, b) for _ in range(5))

        doc = seeded(api, a)
        big = prepend_items(doc, items)
        t0, c0 = time.perf_counter(), cpu_s(runtime_pid)
        status = post_sync(api, a, big)
        wall = time.perf_counter() - t0
        out["big_update"] = {"bytes": len(big), "status": status, "wall_s": wall,
                             "runtime_cpu_s": settled_cpu_s(runtime_pid) - c0}
        doc = seeded(api, a)  # what the runtime holds now (the big update, or not when refused)
        walls, cpus, statuses = [], [], []
        for i in range(small_syncs):
            before = doc.get_state()
            doc.get("state", type=Map)["mobile"]["view"] = "files" if i % 2 == 0 else "chat"
            t0, c0 = time.perf_counter(), cpu_s(runtime_pid)
            statuses.append(post_sync(api, a, doc.get_update(before)))
            walls.append(time.perf_counter() - t0)
            cpus.append(settled_cpu_s(runtime_pid) - c0)
        out["small_sync"] = {"wall_s_median": statistics.median(walls), "runtime_cpu_s_median": statistics.median(cpus),
                             "statuses": statuses}

        stop = threading.Event()

        def hammer() -> None:
            with httpx.Client(base_url=stack.url(), headers=HEADERS, timeout=120) as other:
                while not stop.is_set():
                    post_sync(other, a, big)

        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        try:
            out["prompt_rtt_during_heavy_syncs_s"] = statistics.median(prompt_rtt(api, r, b) for _ in range(5))
        finally:
            stop.set()
            for t in threads:
                t.join()
        sizes = ui_event_sizes(r, a)
        out["ui_update_events"] = {"count": len(sizes), "bytes_median": statistics.median(sizes) if sizes else 0,
                                   "bytes_max": max(sizes, default=0),
                                   "events_stream_memory_bytes": r.memory_usage(keys.events(a))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--small-syncs", type=int, default=5)
    parser.add_argument("--data-dir", help="keep the services' data and logs here (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(args.data_dir or tmp)
        stack = Stack(redis_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), data_dir=data_dir)
        stack.start()
        try:
            print(json.dumps(run(stack, args.items, args.small_syncs), indent=1))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
