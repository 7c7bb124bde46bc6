"""Helpers for the workspace hostile tests: a stack with a small workspace quota, sessions, scripted tools."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, Stack

ALICE = {"Authorization": f"Bearer {API_TOKEN}"}
QUOTA_BYTES = 300_000
QUOTA_FILES = 40
QUOTA_ENV = {"GAMMA_WORKSPACE_MAX_BYTES": str(QUOTA_BYTES), "GAMMA_WORKSPACE_MAX_FILES": str(QUOTA_FILES)}


def start_stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp(name), env_overrides=dict(QUOTA_ENV))
    try:
        s.start()
        yield s
    finally:
        s.stop()


def client(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers=ALICE, timeout=httpx.Timeout(60, read=60))


def workspace(stack: Stack, sid: str) -> Path:
    return stack.data_dir / "sessions" / sid / "workspace"


def new_session(api: httpx.Client) -> str:
    resp = api.post("/sessions")
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["id"])


def replies(api: httpx.Client, sid: str) -> list[str]:
    return [e["text"] for e in api.get(f"/sessions/{sid}/preview").json()["transcript"] if e["kind"] == "message_user"]


def say(api: httpx.Client, sid: str, message: str, expect: str, timeout: float = 60) -> None:
    before = len(replies(api, sid))
    assert api.post(f"/sessions/{sid}/messages", json={"message": message}).status_code == 202
    wait_sync(lambda: len(replies(api, sid)) > before and any(expect in t for t in replies(api, sid)[before:]),
              timeout=timeout, interval=0.2, what=f"a reply containing {expect!r}")


def live_session(api: httpx.Client) -> str:
    sid = new_session(api)
    say(api, sid, "hello there", "hello there")
    wait_sync(lambda: api.get(f"/sessions/{sid}").json()["status"] == "live", timeout=30, what="live")
    return sid


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def run_tools(api: httpx.Client, sid: str, *steps: dict[str, Any], marker: str) -> None:
    """Play tool calls through the scripted model, then a blocking message_user `marker`."""
    script = [*steps, call("message_user", message=marker, blockOnUser=True)]
    say(api, sid, "script:" + json.dumps(script), marker)


def tool_results(stack: Stack, sid: str, tool: str) -> list[tuple[bool, str]]:
    """(is_error, text) of every result of `tool` in the session's transcript, in order."""
    path = stack.data_dir / "sessions" / sid / "transcript.jsonl"
    out = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        m = entry.get("message") or {}
        if entry.get("type") == "message" and m.get("role") == "toolResult" and \
                (m.get("toolName") or m.get("tool_name")) == tool:
            text = "".join(c.get("text", "") for c in m.get("content", []))
            out.append((bool(m.get("isError", m.get("is_error"))), text))
    return out


def timed(fn: Any, *args: Any, **kw: Any) -> tuple[httpx.Response, float]:
    t0 = time.monotonic()
    resp = fn(*args, **kw)
    return resp, time.monotonic() - t0
