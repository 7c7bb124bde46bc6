"""A runtime + proxy stack per sandbox layer for the hostile-tree tests, driven over the public API."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.runtime_support import call, done, script
from tests.sandbox.conftest import layer_params
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries
from tests.support.stack import API_TOKEN, Stack

MAX_ENTRIES = 5000
MAX_DEPTH = 64
LAYERS = layer_params()


def start_stack(layer: str, redis_url: str, data_dir: Path) -> Stack:
    stack = Stack(redis_url=redis_url, data_dir=data_dir,
                  env_overrides={"GAMMA_SANDBOX": layer, "GAMMA_WORKSPACE_MAX_ENTRIES": str(MAX_ENTRIES),
                                 "GAMMA_WORKSPACE_MAX_DEPTH": str(MAX_DEPTH), "GAMMA_IDLE_S": "300"})
    return stack.start("runtime", "proxy")


@pytest.fixture(scope="module", params=LAYERS)
def tree_stack(request: pytest.FixtureRequest, module_redis_url: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = start_stack(request.param, module_redis_url, tmp_path_factory.mktemp(f"trees-{request.param}"))
    try:
        yield stack
    finally:
        stack.stop()


def api(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=60)


def workspace(stack: Stack, sid: str) -> Path:
    return Path(stack.data_dir) / "sessions" / sid / "workspace"


def tools(client: httpx.Client, sid: str, *calls: dict[str, Any], timeout_s: float = 240) -> list[dict[str, Any]]:
    """One prompt whose scripted model makes `calls` (one step each); the new tool results, in order."""
    before = len(_results(client, sid))
    ask(client, sid, script(*({"tool_calls": [c]} for c in calls), done()), timeout_s=timeout_s)
    return _results(client, sid)[before:]


def _results(client: httpx.Client, sid: str) -> list[dict[str, Any]]:
    items = entries(client, sid)
    out = [r for r in (e["message"] for e in items if e["type"] == "message")
           if r["role"] == "toolResult" and r["toolName"] != "message_user"]
    for r in out:
        r["text"] = "".join(part.get("text", "") for part in r["content"])
    return out


def bash(client: httpx.Client, sid: str, command: str, timeout: int | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"command": command} | ({"timeout": timeout} if timeout else {})
    [result] = tools(client, sid, call("bash", **args))
    return result


def suspend(client: httpx.Client, sid: str) -> None:
    assert client.post(f"/sessions/{sid}/suspend").status_code == 200
    wait_sync(lambda: client.get(f"/sessions/{sid}").json().get("status") == "dormant", timeout=60,
              what="the session dormant")


def nest(root: Path, name: str, depth: int) -> None:
    """A chain of `depth` directories under root/name, made through dir fds (longer than PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(depth):
            os.mkdir(name if i == 0 else "d", dir_fd=fd)
            nxt = os.open(name if i == 0 else "d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
