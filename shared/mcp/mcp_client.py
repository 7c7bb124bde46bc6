"""The harness as an MCP client over streamable HTTP (docs/integration.md "MCP connectors").

One HTTP client per listing or call, built here for the notifications service (the listing at
registration) and the runtime (each call) alike:
- every request (the MCP POSTs, a legacy session's GET and DELETE, the OAuth token request) passes
  the URL policy first (shared/mcp/mcp_urls.py), and every response body is counted: past
  `max_bytes` the read fails (`ResponseTooLarge`), so a server cannot make the harness buffer
  without bound (the SDK caps one SSE event; JSON bodies it reads whole);
- the credential goes in a header of the harness's own HTTP client (bearer, a static header, or an
  OAuth client-credentials token fetched with `resource` = the MCP URL, RFC 8707); it never reaches
  a log line: the SDK logs URLs, never headers, and no URL carries one (shared/mcp/mcp_urls.py);
- the protocol: the revision the server spoke at registration is pinned for the calls (2026-07-28
  needs no handshake; a 2025-11-25 server gets its `initialize`), `auto` (probe, then fall back) for
  a listing, as the SDK's `Client` implements it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation, Tool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from shared.contracts.mcp import BearerAuth, ClientCredentialsAuth, HeaderAuth, McpAuth
from shared.mcp.mcp_urls import AllowList, check

CLIENT_INFO = Implementation(name="gamma-harness", version="1.0")
MAX_PAGES = 20  # tools/list pages followed at one listing
CONNECT_TIMEOUT_S = 10.0


class ResponseTooLarge(httpx2.ReadError):
    """A response body past the harness's limit: the read stops there."""


class AuthFailed(Exception):
    """The OAuth token request failed; the message names the status, never a secret."""


@dataclass(frozen=True)
class Reach:
    """How to reach one MCP server."""

    url: str
    auth: McpAuth | None
    allowed: AllowList
    max_bytes: int


@dataclass
class Delivery:
    """What the transport saw of a `tools/call`: whether its POST may have reached the server (a
    connect error means it did not), and whether its answer was cut at the byte limit. The SDK
    reports a broken stream as a JSON-RPC error of its own making (`-32000`), so the outcome of a
    failed call is judged from this, not from the error (services/runtime/connector/mcp_calls.py)."""

    call_sent: bool = False
    too_large: bool = False


class _Counted(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, seen: Delivery) -> None:
        self.inner = inner
        self.limit = limit
        self.seen = seen

    async def __aiter__(self) -> AsyncIterator[bytes]:
        count = 0
        async for chunk in self.inner:
            count += len(chunk)
            if count > self.limit:
                self.seen.too_large = True
                raise ResponseTooLarge(f"the MCP server's response exceeds {self.limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Guarded(httpx2.AsyncBaseTransport):
    """The URL policy before every request, the byte limit on every response."""

    def __init__(self, allowed: AllowList, max_bytes: int, seen: Delivery | None = None) -> None:
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False)
        self.allowed = allowed
        self.max_bytes = max_bytes
        self.seen = seen or Delivery()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await check(str(request.url), self.allowed)
        try:
            is_call = request.method == "POST" and b'"tools/call"' in request.content
        except httpx2.RequestNotRead:  # a streamed body: count it as a call (never "not sent" wrongly)
            is_call = request.method == "POST"
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            raise  # nothing reached the server
        except BaseException:
            self.seen.call_sent = self.seen.call_sent or is_call
            raise
        self.seen.call_sent = self.seen.call_sent or is_call
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _Counted(response.stream, self.max_bytes, self.seen)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


# Tokens by (token URL, client id, resource, a hash of the secret): one fetch serves every call of
# this process until it expires (less a minute); a 401 fetches a new one once.
_TOKENS: dict[tuple[str, str, str, str], tuple[str, float]] = {}


class _ClientCredentials(httpx2.Auth):
    def __init__(self, auth: ClientCredentialsAuth, resource: str, allowed: AllowList) -> None:
        self.auth = auth
        self.resource = resource
        self.allowed = allowed
        secret_hash = hashlib.sha256(auth.client_secret.get_secret_value().encode()).hexdigest()
        self.key = (auth.token_url, auth.client_id, resource, secret_hash)

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        request.headers["Authorization"] = f"Bearer {await self._token(fresh=False)}"
        response = yield request
        if response.status_code == 401:
            request.headers["Authorization"] = f"Bearer {await self._token(fresh=True)}"
            yield request

    def sync_auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        raise RuntimeError("the MCP client is async only")

    async def _token(self, fresh: bool) -> str:
        held = _TOKENS.get(self.key)
        if held is not None and not fresh and held[1] > time.monotonic():
            return held[0]
        data = {"grant_type": "client_credentials", "resource": self.resource}
        if self.auth.scope:
            data["scope"] = self.auth.scope
        async with httpx2.AsyncClient(transport=_Guarded(self.allowed, 64 * 1024), trust_env=False,
                                      timeout=CONNECT_TIMEOUT_S) as http:
            response = await http.post(self.auth.token_url, data=data, auth=(
                self.auth.client_id, self.auth.client_secret.get_secret_value()))
            body = await response.aread()
        if response.status_code != 200:
            raise AuthFailed(f"the token endpoint answered {response.status_code}")
        try:
            parsed = httpx2.Response(200, content=body).json()
            token, ttl = str(parsed["access_token"]), float(parsed.get("expires_in", 300))
        except (ValueError, KeyError, TypeError):
            raise AuthFailed("the token endpoint's answer has no access_token") from None
        _TOKENS[self.key] = (token, time.monotonic() + max(ttl - 60, 1))
        return token


def _http(reach: Reach, read_timeout_s: float, seen: Delivery | None) -> httpx2.AsyncClient:
    headers: dict[str, str] = {}
    auth: httpx2.Auth | None = None
    if isinstance(reach.auth, BearerAuth):
        headers["Authorization"] = f"Bearer {reach.auth.token.get_secret_value()}"
    elif isinstance(reach.auth, HeaderAuth):
        headers[reach.auth.name] = reach.auth.value.get_secret_value()
    elif isinstance(reach.auth, ClientCredentialsAuth):
        auth = _ClientCredentials(reach.auth, reach.url, reach.allowed)
    return httpx2.AsyncClient(transport=_Guarded(reach.allowed, reach.max_bytes, seen), headers=headers, auth=auth,
                              timeout=httpx2.Timeout(CONNECT_TIMEOUT_S, read=read_timeout_s), trust_env=False,
                              follow_redirects=False)


def mode_of(protocol: str | None) -> str:
    """The SDK's connect mode for a server that spoke `protocol` before (None: probe)."""
    if protocol is None:
        return "auto"
    return protocol if protocol in MODERN_PROTOCOL_VERSIONS else "legacy"


@asynccontextmanager
async def connect(reach: Reach, protocol: str | None, read_timeout_s: float,
                  seen: Delivery | None = None) -> AsyncIterator[Client]:
    """A connected client; the URL is checked before anything is sent. `seen` records what the
    transport saw of a `tools/call` (Delivery)."""
    await check(reach.url, reach.allowed)
    async with _http(reach, read_timeout_s, seen) as http:
        transport = streamable_http_client(reach.url, http_client=http, max_sse_event_size=reach.max_bytes)
        async with Client(transport, mode=mode_of(protocol), cache=None, client_info=CLIENT_INFO,
                          read_timeout_seconds=read_timeout_s) as client:
            yield client


async def list_all(client: Client, max_tools: int) -> list[Tool]:
    """Every tool, following `nextCursor` (at most MAX_PAGES pages and `max_tools` tools)."""
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None or len(tools) >= max_tools:
            break
    return tools[:max_tools]
