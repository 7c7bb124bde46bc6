"""One MCP call as the runtime makes it (services/runtime/connector/mcp_calls.py `McpCall`), against the `mcp`
SDK's own server started as a process (tests/support/mcp_server.py): progress becomes
`tool_execution_update` events, the abort signal ends the call at once and it is not sent again, a
server that is gone is "not sent", one past the byte limit says so."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.runtime.connector.mcp_calls import McpCall, McpLimits
from services.runtime.engine.types import AgentEvent, ToolContext
from shared.contracts.records.connectors import Connector, ConnectorTool, McpEndpoint
from shared.contracts.records.messages import ToolCall
from shared.mcp import connectors as rules
from shared.mcp.mcp_urls import allow_list
from tests.support.mcp_servers import McpProcess, start_python

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("mcp-calls")]
LIMITS = McpLimits(keyring="", allowed=allow_list("127.0.0.1"), max_bytes=64 * 1024)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpProcess]:
    p = start_python(tmp_path_factory.mktemp("mcp-calls"))
    try:
        yield p
    finally:
        p.stop()


def connector(url: str, tool: str, timeout_s: float = 30) -> tuple[Connector, ConnectorTool]:
    spec = ConnectorTool(name=tool, description="d", parameters={"type": "object"}, timeout_s=timeout_s)
    c = Connector(name="srv", version=1, updated_at=0, description="d", tools=[spec],
                  mcp=McpEndpoint(url=url, protocol="2026-07-28", names={tool: tool}))
    return c, spec


def context(events: list[AgentEvent], tool: str) -> ToolContext:
    async def emit(event: AgentEvent) -> None:
        events.append(event)
    return ToolContext(call=ToolCall(id="call_1", name=f"srv__{tool}"), batch=[], signal=asyncio.Event(), emit=emit)


async def test_progress_is_surfaced_and_an_abort_ends_the_call_at_once(server: McpProcess) -> None:
    c, spec = connector(server.url, "slow")
    events: list[AgentEvent] = []
    ctx = context(events, "slow")
    done = await McpCall(None, "s1", LIMITS, c, spec, ctx).run(None, {"seconds": 1.0})
    assert json.loads(done) == {"status": "ok", "content": "worked 1.0 s"}
    assert [(e.type, e.data["progress"], e.data["total"]) for e in events] == [
        ("tool_execution_update", 1, 2), ("tool_execution_update", 2, 2)]

    before = len(server.arrivals())
    ctx = context([], "slow")
    started = time.monotonic()
    asyncio.get_running_loop().call_later(0.8, ctx.signal.set)
    stopped = await McpCall(None, "s1", LIMITS, c, spec, ctx).run(None, {"seconds": 20.0})
    assert time.monotonic() - started < 5 and "The user stopped the call" in json.loads(stopped)["content"]
    assert len(server.arrivals()) == before + 1  # sent once, never again


async def test_a_timeout_a_cut_answer_and_a_server_that_is_gone(server: McpProcess, tmp_path: Path) -> None:
    c, spec = connector(server.url, "slow", timeout_s=1)
    assert await McpCall(None, "s1", LIMITS, c, spec, context([], "slow")).run(None, {"seconds": 10.0}) \
        == rules.TIMED_OUT
    c, spec = connector(server.url, "big_text")
    too_big = await McpCall(None, "s1", LIMITS, c, spec, context([], "big_text")).run(None, {"n": 200_000})
    assert "exceeded 65536 bytes" in json.loads(too_big)["content"]
    gone = start_python(tmp_path)
    gone.kill()
    c, spec = connector(gone.url, "add")
    answer = json.loads(await McpCall(None, "s1", LIMITS, c, spec, context([], "add")).run(None, {"a": 1, "b": 2}))
    assert answer["status"] == "error" and "the call was not sent" in answer["content"]
    c, spec = connector("https://169.254.169.254/mcp", "add")  # the URL policy holds at call time too
    refused = json.loads(await McpCall(None, "s1", LIMITS, c, spec, context([], "add")).run(None, {"a": 1, "b": 2}))
    assert "non-public address" in refused["content"] and "not sent" in refused["content"]
