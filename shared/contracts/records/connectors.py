"""Connectors (docs/architecture.md "Connectors"): an outside service that offers tools to the agent.

HTTP on the notifications service: `PUT /connectors/{name}` (a `ConnectorSpec`), `GET` answers a
`Connector`, `POST /connectors/{name}/results` (a `ConnectorResultSubmit`). The stream
`gamma:connectors:{name}:calls` carries `ConnectorCall`s (plain `XADD {type, data}`); the answer
reaches the session's inbox as a `ConnectorResult` (shared/contracts/streams/inbox.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from shared.contracts.base import Contract

CONNECTOR_NAME = r"^[a-z][a-z0-9_-]{0,40}$"
# The provider's function name is `{connector}__{tool}` (`^[a-zA-Z0-9_-]{1,64}$`): 41 + 2 + 21.
TOOL_NAME = r"^[a-z][a-z0-9_]{0,20}$"
CALL_ID = r"^[A-Za-z0-9_.:-]{1,128}$"
SESSION_ID = r"^[A-Za-z0-9_-]{1,64}$"
WORKSPACE = r"^[A-Za-z0-9_.@-]{1,200}$"
MAX_TOOLS = 16  # per connector
MAX_RESULT_CHARS = 32_000  # one result's text, as the model reads it
MAX_TIMEOUT_S = 600.0
MAX_URL = 2048
# MCP tool names SHOULD be 1-128 characters of [A-Za-z0-9_.-] (docs/integration.md "MCP connectors").
MCP_TOOL_NAME = r"^[A-Za-z0-9_.-]{1,128}$"


class ConnectorTool(Contract):
    name: str = Field(pattern=TOOL_NAME)
    description: str = Field(min_length=1, max_length=1024)
    # The arguments' JSON Schema (draft 2020-12), checked and size-capped by shared/mcp/connectors.py.
    parameters: dict[str, Any]
    timeout_s: float = Field(30.0, gt=0, le=MAX_TIMEOUT_S)


class ConnectorSpec(Contract):
    """`PUT /connectors/{name}`: what the connector offers and who may use it."""

    description: str = Field(min_length=1, max_length=2000)
    tools: list[ConnectorTool] = Field(min_length=1, max_length=MAX_TOOLS)
    # The workspaces (session owners) whose sessions may load it; None: every workspace.
    workspaces: list[Annotated[str, Field(pattern=WORKSPACE)]] | None = Field(None, max_length=1000)


class SkippedTool(Contract):
    """A tool of an MCP server the harness does not offer, and why (its schema, its name, the limit)."""

    name: str = Field(max_length=200)
    why: str = Field(max_length=500)


class McpEndpoint(Contract):
    """An MCP connector's server (docs/integration.md "MCP connectors"); never its credential, which
    is stored encrypted on its own (shared/mcp/mcp_secrets.py)."""

    url: str = Field(max_length=MAX_URL)
    protocol: str = Field(max_length=32)  # the revision the server spoke when its tools were listed
    server_name: str | None = Field(None, max_length=200)
    server_version: str | None = Field(None, max_length=200)
    # provider-facing tool name -> the server's own name
    names: dict[Annotated[str, Field(pattern=TOOL_NAME)], Annotated[str, Field(pattern=MCP_TOOL_NAME)]]
    skipped: list[SkippedTool] = Field(default_factory=list, max_length=200)
    requested: list[Annotated[str, Field(pattern=MCP_TOOL_NAME)]] | None = Field(None, max_length=64)  # None: all
    auth: Literal["none", "bearer", "header", "oauth_client_credentials"] = "none"
    # "operator" (the service credential) or "user:{sub}" (a workspace owner: only it may change it)
    registered_by: str = Field("operator", max_length=300)


class Connector(ConnectorSpec):
    """A registered connector, as stored and as `GET /connectors/{name}` answers it. `version` grows
    with every change, so a session tells a changed schema from the one it loaded."""

    name: str = Field(pattern=CONNECTOR_NAME)
    version: int = Field(ge=1)
    updated_at: int = Field(ge=0)
    mcp: McpEndpoint | None = None  # an MCP server's tools: the runtime calls the server itself


class ConnectorList(Contract):
    connectors: list[Connector]


class ConnectorCall(Contract):
    """One call on `gamma:connectors:{name}:calls`: the arguments and the session id, nothing else of
    the session (docs/architecture.md "Connectors": a connector never sees the transcript)."""

    type: Literal["connector_call"] = "connector_call"
    call_id: str = Field(pattern=CALL_ID)
    session_id: str = Field(pattern=SESSION_ID)
    connector: str = Field(pattern=CONNECTOR_NAME)
    tool: str = Field(pattern=TOOL_NAME)
    arguments: dict[str, Any]
    deadline_ms: int = Field(ge=0)  # epoch ms; an answer after it is dropped


class ConnectorResultSubmit(Contract):
    """`POST /connectors/{name}/results`. `accepted`: the work goes on; the connector posts again
    for the same call (ok or error) when it is done, and that answer reaches the agent as a
    `background_result` notification."""

    call_id: str = Field(pattern=CALL_ID)
    session_id: str = Field(pattern=SESSION_ID)
    status: Literal["ok", "error", "accepted"]
    content: str = Field(max_length=MAX_RESULT_CHARS)


class ConnectorResultAccepted(Contract):
    call_id: str
    status: Literal["delivered", "duplicate", "late", "completed"]
