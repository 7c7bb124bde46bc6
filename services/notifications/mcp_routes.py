"""MCP servers as connectors on the notifications service (docs/integration.md "MCP connectors").

`PUT /connectors/{name}/mcp` (an `McpConnectorSpec`): the URL is checked (shared/mcp/mcp_urls.py), the
server's tools are listed with the credential given (shared/mcp/mcp_client.py), converted and checked like
a registered connector's (shared/mcp/mcp_tools.py), the credential is stored encrypted
(shared/mcp/mcp_secrets.py) and the connector is stored in the registry like any other: sessions load it
with `load_tools` and hear of it in the catalog's `workspace_update`. `POST /connectors/{name}/mcp/refresh`
lists the tools again with the stored credential; the same tools change nothing (same version).

Who may: the operator (the service credential, as for every connector route), or a workspace owner
(a user's IdP JWT): a user's connector is enabled for the user's own workspace only, and only that
user (or the operator) may replace, refresh or remove it.
"""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis
import structlog
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from services.notifications.connectors import _ERROR, AUTH, ConnectorMetrics, _body, _dumped, _json
from services.notifications.http import _error, refusal
from shared.contracts.mcp import McpAuth, McpConnectorSpec
from shared.contracts.records.connectors import Connector, ConnectorSpec, McpEndpoint
from shared.mcp import connectors as rules
from shared.mcp import mcp_secrets
from shared.mcp.mcp_client import AuthFailed, Reach, connect, list_all
from shared.mcp.mcp_tools import convert
from shared.mcp.mcp_urls import AllowList, UrlRefused, allow_list, check
from shared.settings import NotificationSettings
from shared.trust.oidc import BearerVerifier, InvalidBearer, looks_like_jwt

log = structlog.get_logger()
MAX_MCP_REGISTRATION_BYTES = 64 * 1024
MAX_LISTED = 500  # tools read from one server before the choice of `tools`


async def registrant(request: Request, service_token: str, verifier: BearerVerifier | None) -> str | JSONResponse:
    """"operator" for the service credential, "user:{sub}" for a user's JWT, else the 401/403."""
    header = request.headers.get("authorization", "")
    refused = await refusal(header, service_token, verifier)
    if refused is None:
        return "operator"
    token = header.partition(" ")[2]
    if verifier is None or not looks_like_jwt(token):
        return refused
    try:
        return "user:" + await verifier.user(token)
    except InvalidBearer:
        return refused


def may_change(who: str, existing: Connector | None) -> bool:
    if who == "operator" or existing is None:
        return True
    return existing.mcp is not None and existing.mcp.registered_by == who


def _unusable(why: str) -> JSONResponse:
    """The URL does not lead to an MCP server the harness can list: the registration's input is the
    problem as far as the harness can tell (a 422 naming the field; nothing stored)."""
    return _error(422, "the URL does not lead to a usable MCP server", [{"loc": ["body", "url"], "msg": why}])


async def listed(name: str, spec: McpConnectorSpec, auth: McpAuth | None, s: NotificationSettings,
                  who: str) -> tuple[ConnectorSpec, McpEndpoint] | JSONResponse:
    reach = Reach(url=spec.url, auth=auth, allowed=allow_list(s.mcp_allowed_hosts), max_bytes=s.mcp_max_response_bytes)
    try:
        async with asyncio.timeout(s.mcp_list_timeout_s):
            async with connect(reach, None, s.mcp_list_timeout_s) as client:
                tools = await list_all(client, MAX_LISTED)
                protocol, info = client.protocol_version, client.server_info
    except UrlRefused as exc:
        return _unusable(f"the URL may not be reached: {exc}")
    except TimeoutError:
        return _unusable(f"the MCP server did not list its tools within {s.mcp_list_timeout_s:g} s")
    except MCPError as exc:
        return _unusable(f"the MCP server answered an error: {exc.error.code} {exc.error.message[:300]}")
    except AuthFailed as exc:
        return _unusable(f"the OAuth token request failed: {exc}")
    except Exception as exc:  # noqa: BLE001 - any failure to reach the server is the caller's 422, never a 500
        log.info("mcp_listing_failed", connector=name, error_type=type(exc).__name__)
        return _unusable(f"the MCP server could not be reached or did not speak MCP ({type(exc).__name__})")
    offered, names, skipped = convert(tools, spec.tools, spec.timeout_s)
    if not offered:
        return _error(422, "the MCP server offers no tool the harness can use",
                      [{"loc": ["body", "tools"], "msg": f"{t.name}: {t.why}"} for t in skipped[:50]])
    workspaces = spec.workspaces if who == "operator" else [who.removeprefix("user:")]
    endpoint = McpEndpoint(url=spec.url, protocol=protocol, names=names, skipped=skipped[:200], requested=spec.tools,
                           server_name=(info.name[:200] if info else None),
                           server_version=(info.version[:200] if info else None),
                           auth=auth.type if auth else "none", registered_by=who)
    return ConnectorSpec(description=spec.description, tools=offered, workspaces=workspaces), endpoint


class McpRegistrations:
    """The three actions, each answering a response (the routes only authenticate and parse)."""

    def __init__(self, client: aioredis.Redis, settings: NotificationSettings, metrics: ConnectorMetrics) -> None:
        self.client = client
        self.settings = settings
        self.metrics = metrics

    async def register(self, name: str, who: str, spec: McpConnectorSpec, auth: McpAuth | None) -> Response:
        existing = await rules.get_connector(self.client, name)
        if not may_change(who, existing):
            return _error(403, f"the connector {name} is not yours to change")
        if auth is not None and not self.settings.mcp_secret_key:
            return _error(422, "this deployment stores no MCP credentials", [{"loc": ["body", "auth"], "msg":
                          "GAMMA_MCP_SECRET_KEY is not set: register the server without `auth`, or ask the operator"}])
        got = await listed(name, spec, auth, self.settings, who)
        if isinstance(got, JSONResponse):
            self.metrics.registrations.labels("invalid").inc()
            return got
        offered, endpoint = got
        # The credential first: it is bound to the URL (shared/mcp/mcp_secrets.py), so a call made
        # in between never presents it to another server.
        await mcp_secrets.store(self.client, name, spec.url, auth, self.settings.mcp_secret_key)
        try:
            stored = await rules.put_connector(self.client, name, offered, self.settings.max_connectors, endpoint)
        except rules.TooManyConnectors as exc:
            await mcp_secrets.drop(self.client, name)
            return _error(422, "too many connectors", [{"loc": ["path", "name"], "msg": str(exc)}])
        self.metrics.registrations.labels("stored").inc()
        log.info("mcp_connector_registered", connector=name, version=stored.version, tools=len(stored.tools),
                 protocol=endpoint.protocol, by=who.split(":", 1)[0])
        return _dumped(stored)

    async def owned(self, name: str, who: str) -> Connector | JSONResponse:
        existing = await rules.get_connector(self.client, name)
        if existing is None or existing.mcp is None:
            return _error(404, f"no MCP connector {name}")
        if not may_change(who, existing):
            return _error(403, f"the connector {name} is not yours to change")
        return existing

    async def refresh(self, existing: Connector) -> Response:
        assert existing.mcp is not None
        auth: McpAuth | None = None
        if existing.mcp.auth != "none":
            try:
                auth = await mcp_secrets.load(self.client, existing.name, existing.mcp.url, self.settings.mcp_secret_key)
            except (mcp_secrets.BadSecret, mcp_secrets.NoSecretKey) as exc:
                return _error(409, f"{exc}: register the connector again with its credential")
        return await self.register(existing.name, existing.mcp.registered_by, _spec_of(existing), auth)

    async def delete(self, name: str) -> Response:
        await rules.delete_connector(self.client, name)
        await mcp_secrets.drop(self.client, name)
        self.metrics.registrations.labels("deleted").inc()
        log.info("mcp_connector_removed", connector=name)
        return Response(status_code=204)


async def _parsed(name: str, who: str, request: Request, allowed: AllowList) -> McpConnectorSpec | JSONResponse:
    data = await _json(request, MAX_MCP_REGISTRATION_BYTES)
    if isinstance(data, JSONResponse):
        return data
    problems = rules.check_name(name)
    try:
        spec = McpConnectorSpec.model_validate(data)
    except ValidationError as exc:  # never the input: it may hold the credential
        return _error(422, "invalid MCP connector", problems + json.loads(exc.json(include_url=False,
                                                                                   include_input=False)))
    if problems:
        return _error(422, "invalid MCP connector", problems)
    if who != "operator" and spec.workspaces not in (None, [who.removeprefix("user:")]):
        return _error(403, "a workspace owner registers a connector for their own workspace only")
    try:
        await check(spec.url, allowed)
    except UrlRefused as exc:
        return _error(422, "the URL may not be reached", [{"loc": ["body", "url"], "msg": str(exc)}])
    return spec


def make_mcp_router(client: aioredis.Redis, settings: NotificationSettings, service_token: str,
                    verifier: BearerVerifier | None, metrics: ConnectorMetrics) -> APIRouter:
    router = APIRouter()
    actions = McpRegistrations(client, settings, metrics)
    allowed = allow_list(settings.mcp_allowed_hosts)

    @router.put("/connectors/{name}/mcp", response_model=Connector, openapi_extra=_body(McpConnectorSpec),
                responses={**AUTH, 413: {"description": "body too large", "content": _ERROR},
                           422: {"description": "a bad field, a refused URL, a server that could not be listed, no "
                                 "usable tool, or a credential on a deployment without GAMMA_MCP_SECRET_KEY",
                                 "content": _ERROR}})
    async def put_mcp(name: str, request: Request) -> Response:
        who = await registrant(request, service_token, verifier)
        if isinstance(who, JSONResponse):
            return who
        spec = await _parsed(name, who, request, allowed)
        return spec if isinstance(spec, JSONResponse) else await actions.register(name, who, spec, spec.auth)

    @router.post("/connectors/{name}/mcp/refresh", response_model=Connector,
                 responses={**AUTH, 404: {"description": "no such MCP connector", "content": _ERROR},
                            409: {"description": "the stored credential cannot be read", "content": _ERROR},
                            422: {"description": "the server could not be listed", "content": _ERROR}})
    async def refresh_mcp(name: str, request: Request) -> Response:
        who = await registrant(request, service_token, verifier)
        if isinstance(who, JSONResponse):
            return who
        existing = await actions.owned(name, who)
        return existing if isinstance(existing, JSONResponse) else await actions.refresh(existing)

    @router.delete("/connectors/{name}/mcp", status_code=204,
                   responses={**AUTH, 404: {"description": "no such MCP connector", "content": _ERROR}})
    async def delete_mcp(name: str, request: Request) -> Response:
        who = await registrant(request, service_token, verifier)
        if isinstance(who, JSONResponse):
            return who
        existing = await actions.owned(name, who)
        return existing if isinstance(existing, JSONResponse) else await actions.delete(name)

    return router


def _spec_of(c: Connector) -> McpConnectorSpec:
    assert c.mcp is not None
    return McpConnectorSpec(url=c.mcp.url, description=c.description, tools=c.mcp.requested,
                            timeout_s=c.tools[0].timeout_s if c.tools else 30.0,
                            workspaces=None if c.mcp.registered_by != "operator" else c.workspaces)
