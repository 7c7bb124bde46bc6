"""MCP servers as connectors (docs/integration.md "MCP connectors").

`PUT /connectors/{name}/mcp` takes an `McpConnectorSpec`: the server's URL (streamable HTTP) and the
credential the harness presents to it. The harness lists the server's tools and stores a `Connector`
(shared/contracts/records/connectors.py) whose `mcp` field is an `McpEndpoint`: the URL, the protocol
revision the server spoke, and the map from the provider-facing tool names to the server's own.
The credential is never part of it: it is stored encrypted on its own (shared/mcp/mcp_secrets.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr

from shared.contracts.base import Contract
from shared.contracts.records.connectors import MAX_TIMEOUT_S, MAX_URL, MCP_TOOL_NAME, WORKSPACE

HEADER_NAME = r"^[A-Za-z0-9-]{1,64}$"


class BearerAuth(Contract):
    type: Literal["bearer"] = "bearer"
    token: SecretStr = Field(min_length=1, max_length=8192)


class HeaderAuth(Contract):
    """A static header (an API key the server reads from `X-Api-Key`, say)."""

    type: Literal["header"] = "header"
    name: str = Field(pattern=HEADER_NAME)
    value: SecretStr = Field(min_length=1, max_length=8192)


class ClientCredentialsAuth(Contract):
    """OAuth 2.1 client credentials: the harness fetches an access token from `token_url` (with
    `resource` = the MCP URL, RFC 8707) and presents it as a bearer token until it expires."""

    type: Literal["oauth_client_credentials"] = "oauth_client_credentials"
    token_url: str = Field(min_length=8, max_length=MAX_URL)
    client_id: str = Field(min_length=1, max_length=512)
    client_secret: SecretStr = Field(min_length=1, max_length=8192)
    scope: str | None = Field(None, max_length=1024)


McpAuth = Annotated[BearerAuth | HeaderAuth | ClientCredentialsAuth, Field(discriminator="type")]


class McpConnectorSpec(Contract):
    """`PUT /connectors/{name}/mcp`."""

    url: str = Field(min_length=8, max_length=MAX_URL)
    description: str = Field(min_length=1, max_length=2000)
    auth: McpAuth | None = None
    # The server's tools to offer (its own names); None: every tool, up to the connector limit.
    tools: list[Annotated[str, Field(pattern=MCP_TOOL_NAME)]] | None = Field(None, min_length=1, max_length=64)
    timeout_s: float = Field(30.0, gt=0, le=MAX_TIMEOUT_S)
    workspaces: list[Annotated[str, Field(pattern=WORKSPACE)]] | None = Field(None, max_length=1000)
