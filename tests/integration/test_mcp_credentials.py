"""MCP connectors: a runtime killed between the send and the answer, and credentials that never
leave the harness (docs/integration.md "MCP connectors").

The runtime is SIGKILLed while the server works on a call: the next holder reports the call's
outcome as unknown and never sends it again (the server counts one arrival). Then every place a
credential could leak is read whole for the bearer token, the OAuth client secret, the access token
the token endpoint issued and the Fernet key: each session's files (transcript, UI state, workspace),
the services' logs (structlog JSON, every line), every Redis key of the stack's db (streams, hashes,
strings: events, inboxes, the registry, call records) and the sandbox (a `bash` call runs `env` and
reads its own environment and workspace)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from cryptography.fernet import Fernet

from tests.integration.runtime_support import call, done, script
from tests.support.mcp_servers import McpProcess, start_python
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries, tool_results
from tests.support.stack import API_TOKEN, SERVICE_TOKEN, Stack

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("mcp-credentials")]
SECRET_KEY = Fernet.generate_key().decode()
TOKEN = "mcp-bearer-CANARY-0d5f41"
OAUTH_SECRET = "oauth-secret-CANARY-b7e2"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, McpProcess]]:
    work = tmp_path_factory.mktemp("mcp-servers")
    started = {"bearer": start_python(work, "--token", TOKEN),
               "oauth": start_python(work, "--oauth", f"gamma-client:{OAUTH_SECRET}")}
    try:
        yield started
    finally:
        for p in started.values():
            p.stop()


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("mcp-cred"),
              env_overrides={"GAMMA_DYNAMIC_TOOLS": "1", "GAMMA_MCP_SECRET_KEY": SECRET_KEY,
                             "GAMMA_MCP_ALLOWED_HOSTS": "127.0.0.1"})
    try:
        yield s.start()
    finally:
        s.stop()


def register(stack: Stack, name: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.put(f"{stack.url('notifications')}/connectors/{name}/mcp", json=body, timeout=60,
                     headers={"Authorization": f"Bearer {SERVICE_TOKEN}"})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def user(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)


def test_a_runtime_killed_mid_call_reports_an_unknown_outcome_and_never_resends(
        stack: Stack, servers: dict[str, McpProcess]) -> None:
    register(stack, "durable", {"url": servers["bearer"].url, "description": "slow work", "tools": ["slow"],
                                "timeout_s": 60, "auth": {"type": "bearer", "token": TOKEN}})
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    assert api.post(f"/sessions/{sid}/messages", json={"message": script(
        {"tool_calls": [call("load_tools", namespace="connector:durable")]},
        {"tool_calls": [call("durable__slow", seconds=6)]}, done("after the takeover"))}).status_code == 202
    wait_sync(lambda: any(json.loads(a)["tool"] == "slow" for a in servers["bearer"].arrivals()), timeout=60,
              what="the call at the server")
    stack.kill("runtime", signal.SIGKILL)
    stack.start("runtime")

    def finished() -> list[dict[str, Any]] | None:
        es = entries(api, sid)
        return es if tool_results(es, "message_user") else None  # the session's one run reached its end

    es = wait_sync(finished, timeout=120, what="the run continued after the takeover")
    (answer,) = tool_results(es, "durable__slow")
    assert answer["isError"] and answer["details"]["unknown_outcome"]
    assert [json.loads(a)["tool"] for a in servers["bearer"].arrivals()].count("slow") == 1  # never re-sent


def test_no_credential_reaches_a_transcript_a_log_an_event_redis_or_the_sandbox(
        stack: Stack, servers: dict[str, McpProcess]) -> None:
    register(stack, "keyed", {"url": servers["oauth"].url, "description": "oauth", "tools": ["add"], "auth": {
        "type": "oauth_client_credentials", "token_url": servers["oauth"].base + "/token",
        "client_id": "gamma-client", "client_secret": OAUTH_SECRET}})
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:keyed")]},
                              {"tool_calls": [call("keyed__add", a=1, b=2)]},
                              {"tool_calls": [call("bash", command="env; ls -la; cat /proc/self/environ | tr '\\0' '\\n'")]},
                              done("looked")), timeout_s=120)
    assert tool_results(es, "keyed__add")[0]["content"][0]["text"] == "3"
    sandbox_view = json.dumps(tool_results(es, "bash"))
    assert "PATH" in sandbox_view or "HOME" in sandbox_view  # the command ran and printed its environment
    issued = servers["oauth"].issued_tokens()
    assert issued  # the harness fetched an access token with the client credential

    canaries = [c.encode() for c in (TOKEN, OAUTH_SECRET, SECRET_KEY, *issued)]
    found: list[str] = []
    for path in Path(stack.data_dir).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path}: {c!r}" for c in canaries if c in data]
    r = redis.Redis.from_url(stack.redis_url)
    for key in r.scan_iter(count=1000):
        kind = r.type(key)
        if kind == b"stream":
            blob = b"".join(b"".join(k + v for k, v in fields.items()) for _, fields in r.xrange(key))
        elif kind == b"hash":
            blob = b"".join(k + v for k, v in r.hgetall(key).items())
        elif kind == b"string":
            blob = r.get(key) or b""
        elif kind == b"list":
            blob = b"".join(r.lrange(key, 0, -1))
        elif kind in (b"set", b"zset"):
            blob = b"".join(r.smembers(key)) if kind == b"set" else b"".join(r.zrange(key, 0, -1))
        else:
            blob = b""
        found += [f"redis {key!r}: {c!r}" for c in canaries if c in blob]
    assert r.hexists("gamma:{connectors}:mcp-credentials", "keyed")  # stored, encrypted: not one canary in it
    assert not found, found
