"""MCP servers as connectors through the five services (docs/integration.md "MCP connectors"):
the official reference server (`@modelcontextprotocol/server-everything`, npm, 2025-11-25 handshake)
and the `mcp` SDK's own server (2026-07-28, behind a bearer token or OAuth client credentials),
both started by the test. Tools listed (sorted, checked, cached per version), loaded with
`load_tools`, called: results, tool errors, progress, a large result, a response past the byte
limit, a server that hangs (timeout), one that dies mid-call (unknown outcome, not re-sent), and the
URL policy and ownership rules at registration."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from cryptography.fernet import Fernet

from shared.redis import keys
from tests.integration.runtime_support import call, done, script
from tests.support.mcp_servers import McpProcess, start_everything, start_python
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries, tool_results
from tests.support.stack import API_TOKEN, SERVICE_TOKEN, Stack

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("mcp")]
SECRET_KEY = Fernet.generate_key().decode()
TOKEN = "mcp-bearer-CANARY-7c1e2b"  # the tests' credentials: test_mcp_credentials.py greps for them
OAUTH_SECRET = "oauth-secret-CANARY-93ad"
MAX_RESPONSE = 128 * 1024  # a text result travels twice (content and structuredContent)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, McpProcess]]:
    work = tmp_path_factory.mktemp("mcp-servers")
    started: dict[str, McpProcess] = {}
    try:
        started["everything"] = start_everything(work)
        started["modern"] = start_python(work, "--token", TOKEN)
        started["oauth"] = start_python(work, "--oauth", f"gamma-client:{OAUTH_SECRET}")
        yield started
    finally:
        for p in started.values():
            p.stop()


@pytest.fixture(scope="module")
def stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(redis_url=module_redis_url, data_dir=tmp_path_factory.mktemp("mcp"),
              env_overrides={"GAMMA_DYNAMIC_TOOLS": "1", "GAMMA_MCP_SECRET_KEY": SECRET_KEY,
                             "GAMMA_MCP_ALLOWED_HOSTS": "127.0.0.1", "GAMMA_MCP_MAX_RESPONSE_BYTES": str(MAX_RESPONSE)})
    try:
        yield s.start()
    finally:
        s.stop()


def service(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url("notifications"), headers={"Authorization": f"Bearer {SERVICE_TOKEN}"},
                        timeout=60)


def user(stack: Stack) -> httpx.Client:
    return httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)


def register(stack: Stack, name: str, url: str, **extra: Any) -> dict[str, Any]:
    resp = service(stack).put(f"/connectors/{name}/mcp", json={"url": url, "description": f"the {name} server", **extra})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def test_registration_refuses_unsafe_urls_and_bad_input(stack: Stack, servers: dict[str, McpProcess]) -> None:
    api = service(stack)
    body = {"description": "d"}
    assert httpx.put(stack.url("notifications") + "/connectors/x/mcp", json={**body, "url": "https://example.com/mcp"}
                     ).status_code == 401
    for url in ("http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/mcp", "https://[::1]/mcp",
                "file:///etc/passwd", "https://user:pw@example.com/mcp", "gopher://example.com/"):
        resp = api.put("/connectors/unsafe/mcp", json={**body, "url": url})
        assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["body", "url"], (url, resp.text)
    resp = api.put("/connectors/x/mcp", json={**body, "url": servers["modern"].url, "auth": {"type": "bearer"}})
    assert resp.status_code == 422 and "token" in resp.text
    closed = api.put("/connectors/closed/mcp", json={**body, "url": "http://127.0.0.1:9/mcp"})
    assert closed.status_code == 422 and closed.json()["detail"][0]["loc"] == ["body", "url"], closed.text
    # The server wants a bearer token: without it, the listing fails and nothing is stored.
    noauth = api.put("/connectors/noauth/mcp", json={**body, "url": servers["modern"].url})
    assert noauth.status_code == 422 and "could not be reached" in noauth.text, noauth.text
    for name in ("unsafe", "x", "closed", "noauth"):
        assert api.get(f"/connectors/{name}").status_code == 404


def test_the_reference_server_is_listed_in_order_and_called(stack: Stack, servers: dict[str, McpProcess]) -> None:
    c = register(stack, "everything", servers["everything"].url, timeout_s=20)
    assert c["mcp"]["protocol"] == "2025-11-25" and c["mcp"]["server_name"] == "mcp-servers/everything"
    remote = [c["mcp"]["names"][t["name"]] for t in c["tools"]]
    assert remote == sorted(remote) and "echo" in remote and "trigger-long-running-operation" in remote
    assert "get_sum" in c["mcp"]["names"]
    again = register(stack, "everything", servers["everything"].url, timeout_s=20)
    assert again["version"] == c["version"]  # the same tools: the same version, sessions hear nothing
    refreshed = service(stack).post("/connectors/everything/mcp/refresh")
    assert refreshed.status_code == 200 and refreshed.json()["version"] == c["version"]
    long_op = next(n for n, r in c["mcp"]["names"].items() if r == "trigger-long-running-operation")

    api, r = user(stack), redis.Redis.from_url(stack.redis_url)
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:everything")]},
                              {"tool_calls": [call("everything__echo", message="hello")]},
                              {"tool_calls": [call("everything__get_sum", a=2, b="three")]},
                              {"tool_calls": [call("everything__get_sum", a=2, b=3)]},
                              {"tool_calls": [call(f"everything__{long_op}", duration=2, steps=4)]}, done()),
             timeout_s=120)
    echo = tool_results(es, "everything__echo")[0]
    assert not echo["isError"] and text(echo) == "Echo: hello"
    invalid, summed = tool_results(es, "everything__get_sum")
    assert invalid["isError"] and "must be number" in text(invalid)  # checked before anything is sent
    assert not summed["isError"] and "5" in text(summed)
    assert not tool_results(es, f"everything__{long_op}")[0]["isError"]
    progress = [json.loads(f[b"data"]) for _, f in r.xrange(keys.events(sid))]
    updates = [e["data"] for e in progress if e["type"] == "tool_execution_update"]
    assert [u["progress"] for u in updates] == [1, 2, 3, 4] and {u["total"] for u in updates} == {4}


def test_a_modern_server_with_oauth_results_errors_and_limits(stack: Stack, servers: dict[str, McpProcess]) -> None:
    c = register(stack, "oauthed", servers["oauth"].url, timeout_s=20, auth={
        "type": "oauth_client_credentials", "token_url": servers["oauth"].base + "/token",
        "client_id": "gamma-client", "client_secret": OAUTH_SECRET})
    assert c["mcp"]["protocol"] == "2026-07-28" and c["mcp"]["auth"] == "oauth_client_credentials"
    assert OAUTH_SECRET not in json.dumps(c) and [t["name"] for t in c["tools"]] == ["add", "big_text", "fail", "slow"]
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    es = ask(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:oauthed")]},
                              {"tool_calls": [call("oauthed__add", a=40, b=2)]},
                              {"tool_calls": [call("oauthed__fail", message="the disk is on fire")]},
                              {"tool_calls": [call("oauthed__big_text", n=40_000)]},
                              {"tool_calls": [call("oauthed__big_text", n=MAX_RESPONSE * 2)]}, done()))
    assert text(tool_results(es, "oauthed__add")[0]) == "42"
    assert tool_results(es, "oauthed__fail")[0]["isError"]
    cut, too_big = tool_results(es, "oauthed__big_text")
    assert not cut["isError"] and len(text(cut)) <= 32_000 and "cut by the harness" in text(cut)
    assert too_big["isError"] and f"exceeded {MAX_RESPONSE} bytes" in text(too_big)


def test_a_hanging_server_times_out_and_a_dead_one_is_an_unknown_outcome(
        stack: Stack, servers: dict[str, McpProcess], tmp_path: Path) -> None:
    register(stack, "hangs", servers["modern"].url, timeout_s=2, tools=["slow"], auth={"type": "bearer", "token": TOKEN})
    dying = start_everything(tmp_path)
    c = register(stack, "dying", dying.url, timeout_s=30, tools=["trigger-long-running-operation"])
    long_op = next(iter(c["mcp"]["names"]))
    api = user(stack)
    sid = api.post("/sessions").json()["id"]
    started = time.monotonic()
    es = ask(api, sid, script({"tool_calls": [call("load_tools", namespace="connector:hangs")]},
                              {"tool_calls": [call("hangs__slow", seconds=30)]}, done()))
    hung = tool_results(es, "hangs__slow")[0]
    assert hung["isError"] and hung["details"]["timed_out"] and time.monotonic() - started < 25

    resp = api.post(f"/sessions/{sid}/messages", json={"message": script(
        {"tool_calls": [call("load_tools", namespace="connector:dying")]},
        {"tool_calls": [call(f"dying__{long_op}", duration=20, steps=20)]}, done("after the death"))})
    assert resp.status_code == 202
    r = redis.Redis.from_url(stack.redis_url)
    wait_sync(lambda: any(e["type"] == "tool_execution_update" and e["data"]["toolName"] == f"dying__{long_op}"
                          for e in (json.loads(f[b"data"]) for _, f in r.xrange(keys.events(sid)))),
              timeout=60, what="the call under way")
    dying.kill()
    es = wait_sync(lambda: (lambda es: es if tool_results(es, f"dying__{long_op}") else None)(entries(api, sid)),
                   timeout=60, what="the dead server's call answered")
    dead = tool_results(es, f"dying__{long_op}")
    assert len(dead) == 1 and dead[0]["isError"] and dead[0]["details"]["unknown_outcome"]
    assert "does not send it again" in text(dead[0])
