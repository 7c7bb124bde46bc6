"""A pycrdt client of the proxy's SessionUIState endpoints, for the hostile UI suites."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis
from pycrdt import Doc, Map

from shared.redis import keys
from shared.ui.uidoc import ROOT, snapshot_of
from tests.support.polling import wait_sync
from tests.support.stack import Stack


def new_session(api: httpx.Client) -> str:
    resp = api.post("/sessions")
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["id"])


def status(api: httpx.Client, sid: str) -> str:
    return str(api.get(f"/sessions/{sid}").json()["status"])


def wake(api: httpx.Client, sid: str) -> None:
    assert api.post(f"/sessions/{sid}/messages", json={"message": "wake up"}).status_code == 202
    wait_sync(lambda: status(api, sid) == "live", timeout=60, interval=0.2, what=f"{sid} live")
    # The prompt's run ends by recording its cost in the UI state (services/runtime/ui/costs.py): wait for
    # it, so a test comparing the document before and after a refused update sees no runtime write.
    wait_sync(lambda: api.get(f"/sessions/{sid}/ui").json()["snapshot"].get("costs"), timeout=60, interval=0.2,
              what=f"{sid}'s first cost record")


def suspend(api: httpx.Client, sid: str) -> None:
    assert api.post(f"/sessions/{sid}/suspend").status_code in (200, 202)
    wait_sync(lambda: status(api, sid) == "dormant", timeout=60, interval=0.2, what=f"{sid} dormant")


def seeded(api: httpx.Client, sid: str) -> Doc:
    """A client document seeded from GET /ui, the way a client that connects fresh starts."""
    resp = api.get(f"/sessions/{sid}/ui")
    assert resp.status_code == 200, resp.text
    doc: Doc = Doc()
    doc.get(ROOT, type=Map)
    doc.apply_update(base64.b64decode(resp.json()["update"]))
    assert snapshot_of(doc) == resp.json()["snapshot"]
    return doc


def edit(doc: Doc, change: Callable[[Map], None]) -> bytes:
    """Run `change` on the root map in one transaction; the incremental update it made."""
    before = doc.get_state()
    with doc.transaction():
        change(doc.get(ROOT, type=Map))
    return bytes(doc.get_update(before))


def sync(api: httpx.Client, sid: str, update: bytes, snapshot: dict[str, Any] | None = None) -> httpx.Response:
    body: dict[str, Any] = {"update": base64.b64encode(update).decode()}
    if snapshot is not None:
        body["snapshot"] = snapshot
    # json.dumps escapes non-ASCII (httpx's json= would fail to encode a lone surrogate)
    return api.post(f"/sessions/{sid}/ui/sync", content=json.dumps(body), headers={"Content-Type": "application/json"})


def stored(stack: Stack, sid: str) -> Any:
    path = stack.data_dir / "sessions" / sid / "state.json"
    return json.loads(path.read_text()) if path.exists() else None


def state_path(stack: Stack, sid: str) -> Path:
    return stack.data_dir / "sessions" / sid / "state.json"


def runtime_cpu_s(stack: Stack) -> float:
    import os

    fields = Path(f"/proc/{stack.procs['runtime'].pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prompt_round_trip(api: httpx.Client, r: redis.Redis, sid: str) -> float:
    """POST a prompt to a live session; seconds until its run's agent_end is on the events stream."""
    newest = r.xrevrange(keys.events(sid), count=1)
    cursor = newest[0][0] if newest else "0"
    start = time.perf_counter()
    assert api.post(f"/sessions/{sid}/messages", json={"message": "hello"}).status_code == 202
    while time.perf_counter() - start < 60:
        got = r.xread({keys.events(sid): cursor}, block=2000, count=100)  # under redis-py's socket timeout
        for entry_id, fields in got[0][1] if got else ():
            cursor = entry_id
            if json.loads(fields[b"data"]).get("type") == "agent_end":
                return time.perf_counter() - start
    raise AssertionError(f"no agent_end for {sid} within 60 s")
