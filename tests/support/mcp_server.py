"""A small MCP server for the MCP connector tests, built on the `mcp` SDK's own `MCPServer`
(streamable HTTP; it speaks 2026-07-28, and a client that sends `initialize` gets 2025-11-25).

`python -m tests.support.mcp_server PORT CALL_LOG [--token T | --oauth CLIENT_ID:SECRET]`:
- `--token T`: every MCP request must carry `Authorization: Bearer T` (else 401);
- `--oauth ID:SECRET`: `POST /token` is an OAuth client-credentials endpoint (HTTP Basic client
  authentication, `resource` required) that issues short tokens; the MCP endpoint takes only those.
The tokens it issues are appended to CALL_LOG with the suffix `.tokens`. Every `tools/call` that arrives is appended to CALL_LOG (the tool and its arguments, one JSON line),
before the tool runs: the tests count arrivals to see that a call was never sent twice.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import sys
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send


def build(call_log: Path) -> MCPServer:
    server = MCPServer("gamma-test-server", version="3.1.4")

    def arrived(tool: str, **args: Any) -> None:
        with call_log.open("a") as f:
            f.write(json.dumps({"tool": tool, "args": args}) + "\n")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        arrived("add", a=a, b=b)
        return str(a + b)

    @server.tool(description="Return n characters of text.")
    def big_text(n: int) -> str:
        arrived("big_text", n=n)
        return "x" * n

    @server.tool(description="Fail with the given message.")
    def fail(message: str) -> str:
        arrived("fail", message=message)
        raise ValueError(message)

    @server.tool(description="Work for the given seconds, reporting progress every half second.")
    async def slow(seconds: float, ctx: Context) -> str:
        arrived("slow", seconds=seconds)
        steps = max(int(seconds * 2), 1)
        for i in range(steps):
            await asyncio.sleep(seconds / steps)
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        return f"worked {seconds} s"

    return server


class Bearer:
    """401 unless the request carries an accepted bearer token; `/token` passes (it has its own auth)."""

    def __init__(self, app: ASGIApp, accepted: set[str]) -> None:
        self.app = app
        self.accepted = accepted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/token":
            headers = dict(scope["headers"])
            token = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
            if token not in self.accepted:
                await JSONResponse({"error": "invalid_token"}, status_code=401,
                                   headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


def token_route(client: str, secret: str, issued: set[str], record: Path) -> Any:
    async def token(request: Request) -> Response:
        basic = request.headers.get("authorization", "").removeprefix("Basic ")
        form = await request.form()
        if base64.b64decode(basic or "=").decode(errors="replace") != f"{client}:{secret}" \
                or form.get("grant_type") != "client_credentials" or not form.get("resource"):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        value = "at-" + secrets.token_hex(16)
        issued.add(value)
        with record.open("a") as f:  # for the test that greps the harness for it
            f.write(value + "\n")
        return JSONResponse({"access_token": value, "token_type": "Bearer", "expires_in": 3600})
    return token


def main(argv: list[str]) -> None:
    port, call_log = int(argv[0]), Path(argv[1])
    server = build(call_log)
    app: ASGIApp = server.streamable_http_app(stateless_http=True, json_response=False)
    accepted: set[str] = set()
    if "--token" in argv:
        accepted.add(argv[argv.index("--token") + 1])
        app = Bearer(app, accepted)
    if "--oauth" in argv:
        client, secret = argv[argv.index("--oauth") + 1].split(":", 1)
        app.router.add_route("/token", token_route(client, secret, accepted, call_log.with_suffix(".tokens")),  # type: ignore[attr-defined]
                             methods=["POST"])
        app = Bearer(app, accepted)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
