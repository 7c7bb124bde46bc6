"""A call of an MCP connector's tool, made by the runtime itself (docs/integration.md "MCP connectors").

Exactly once where MCP allows it. MCP has no idempotency key, and a request whose stream broke must be
sent again under a new id (it may then run twice), so the harness never re-sends: the call's record
(shared/mcp/connectors.py `open_record`, kind `mcp`) is written before the request goes out, and its
outcome is settled once. A worker killed between the send and the answer leaves the record open; the
next holder settles it `unknown` at the wake and the model reads that the call may or may not have
run (services/runtime/connector/connectors.py `resume`). The same when the connection breaks after the request
went out. A call that provably never left (the URL refused, no connection) is an error that says so.

Bounded: the tool's `timeout_s` over the whole call (connect, handshake for a 2025-11-25 server, the
answer), `GAMMA_MCP_MAX_RESPONSE_BYTES` over what is read, the connector's result limit over what the
model reads; the abort signal cancels the call at once (the SDK closes the request's stream, which is
cancellation on 2026-07-28, and sends `notifications/cancelled` on a 2025-11-25 session). Progress
notifications become `tool_execution_update` events for the call. What the server answers is data: a
tool result, neutralised on its way to the model like every tool result.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import structlog
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from mcp_types.jsonrpc import CONNECTION_CLOSED

from services.runtime.engine.types import AgentEvent, ToolContext, ToolOutcome
from shared.contracts.records.connectors import Connector, ConnectorCall, ConnectorTool
from shared.mcp import connectors as rules
from shared.mcp import mcp_secrets
from shared.mcp.mcp_client import AuthFailed, Delivery, Reach, connect
from shared.mcp.mcp_tools import result_text
from shared.mcp.mcp_urls import AllowList, UrlRefused, allow_list
from shared.settings import Settings
from shared.trust.neutralise import neutralise

log = structlog.get_logger()
MAX_PROGRESS_EVENTS = 200  # per call: a server that floods progress cannot flood the events stream


@dataclass(frozen=True)
class McpLimits:
    keyring: str
    allowed: AllowList
    max_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> McpLimits:
        n = settings.notifications
        return cls(keyring=n.mcp_secret_key, allowed=allow_list(n.mcp_allowed_hosts), max_bytes=n.mcp_max_response_bytes)


def _answer(status: str, content: str) -> str:
    return json.dumps({"status": status, "content": content}, separators=(",", ":"))


def not_sent(connector: str, why: str) -> ToolOutcome:
    return ToolOutcome(content=f"The MCP connector {connector} could not be called: {why}. The call was not sent.",
                       is_error=True, details={"connector": connector, "not_sent": True})


class McpCall:
    """One call: the record is open (the caller opened it); this sends it and settles its outcome."""

    def __init__(self, client: Any, sid: str, limits: McpLimits, connector: Connector, spec: ConnectorTool,
                 ctx: ToolContext) -> None:
        self.client = client
        self.sid = sid
        self.limits = limits
        self.connector = connector
        self.spec = spec
        self.ctx = ctx
        self.seen = Delivery()
        self._progress = 0

    async def _on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self._progress += 1
        if self._progress > MAX_PROGRESS_EVENTS:
            return
        data: dict[str, Any] = {"toolCallId": self.ctx.call.id, "toolName": self.ctx.call.name,
                                "progress": progress, "total": total}
        if message:
            data["message"] = neutralise(message[:300])
        await self.ctx.emit(AgentEvent(type="tool_execution_update", data=data))

    async def _send(self, reach: Reach, arguments: dict[str, Any]) -> CallToolResult:
        assert self.connector.mcp is not None
        remote = self.connector.mcp.names[self.spec.name]
        async with connect(reach, self.connector.mcp.protocol, self.spec.timeout_s, self.seen) as session:
            return await session.call_tool(remote, arguments, progress_callback=self._on_progress,
                                           read_timeout_seconds=self.spec.timeout_s)

    async def run(self, auth: Any, arguments: dict[str, Any]) -> str:
        """The outcome to settle: an answer JSON, TIMED_OUT or UNKNOWN (never raises but on a cancel)."""
        assert self.connector.mcp is not None
        reach = Reach(url=self.connector.mcp.url, auth=auth, allowed=self.limits.allowed,
                      max_bytes=self.limits.max_bytes)
        sending = asyncio.ensure_future(self._send(reach, arguments))
        stopper = asyncio.ensure_future(self.ctx.signal.wait())
        try:
            done, _ = await asyncio.wait({sending, stopper}, timeout=self.spec.timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if sending not in done:
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
            if self.ctx.signal.is_set():
                return _answer("error", "The user stopped the call. The MCP server may have done part or all of "
                               "the work; check before calling it again.")
            return rules.TIMED_OUT
        if sending.cancelled():  # the SDK ends a call whose stream failed under it (a body cut at the limit) so
            return self._failed(asyncio.CancelledError())
        exc = sending.exception()
        if exc is None:
            result = sending.result()
            return _answer("error" if result.is_error else "ok", result_text(result))
        return self._failed(exc)

    def _failed(self, exc: BaseException) -> str:
        name = self.connector.name
        if self.seen.too_large:
            return _answer("error", f"The MCP server's answer exceeded {self.limits.max_bytes} bytes; the harness "
                           "stopped reading it. The tool ran; ask for less (a smaller page, a narrower query).")
        if isinstance(exc, UrlRefused | AuthFailed) or not self.seen.call_sent:
            log.info("mcp_call_not_sent", session_id=self.sid, connector=name, error_type=type(exc).__name__)
            return _answer("error", f"The MCP connector {name} could not be reached "
                           f"({_why(exc)}); the call was not sent. You may try again later.")
        if isinstance(exc, MCPError) and exc.error.code != CONNECTION_CLOSED:
            return _answer("error", f"The MCP server refused the call: error {exc.error.code}: "
                           f"{exc.error.message[:1000]}")
        log.warning("mcp_call_outcome_unknown", session_id=self.sid, connector=name, error_type=type(exc).__name__)
        return rules.UNKNOWN


def _why(exc: BaseException) -> str:
    if isinstance(exc, UrlRefused | AuthFailed):
        return str(exc)[:300]
    return type(exc).__name__


async def credential(client: Any, limits: McpLimits, connector: Connector) -> Any:
    """The connector's credential, decrypted for this call only (None: it has none). Raises
    BadSecret or NoSecretKey: the call is then not sent."""
    assert connector.mcp is not None
    if connector.mcp.auth == "none":
        return None
    return await mcp_secrets.load(client, connector.name, connector.mcp.url, limits.keyring)


async def call(client: Any, sid: str, limits: McpLimits, connector: Connector, spec: ConnectorTool,
               args: dict[str, Any], ctx: ToolContext, call_id: str, turn: int, auth: Any) -> str | None:
    """Open the record, send the call, settle its outcome: the outcome that holds (None: the call id
    is taken; the hub sends it under a re-keyed id)."""
    deadline_ms = int((time.time() + spec.timeout_s) * 1000)
    try:
        await rules.open_record(client, ConnectorCall(call_id=call_id, session_id=sid, connector=connector.name,
                                                      tool=spec.name, arguments=args, deadline_ms=deadline_ms),
                                turn, kind=rules.MCP)
    except rules.CallIdTaken:
        return None
    log.info("mcp_call_sent", session_id=sid, connector=connector.name, tool=spec.name, call_id=call_id)
    outcome = await McpCall(client, sid, limits, connector, spec, ctx).run(auth, args)
    _, held = await rules.settle(client, sid, call_id, outcome)
    return held
