"""MCP connector rules without a server (docs/integration.md "MCP connectors"): the URL policy
(SSRF), credentials at rest, tool names and schemas, results as the model reads them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.fernet import Fernet
from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents, Tool
from pydantic import SecretStr, TypeAdapter, ValidationError

from shared.contracts.mcp import BearerAuth, ClientCredentialsAuth, McpAuth, McpConnectorSpec
from shared.contracts.records.connectors import MAX_TOOLS, TOOL_NAME
from shared.mcp import mcp_secrets
from shared.mcp.mcp_tools import convert, local_name, result_text
from shared.mcp.mcp_urls import UrlRefused, allow_list, check, parse

NONE = allow_list("")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/mcp", "https://127.0.0.1/mcp", "https://localhost/mcp", "https://169.254.169.254/latest/",
    "https://10.0.0.8/mcp", "https://192.168.1.1/mcp", "https://[::1]/mcp", "https://[fe80::1]/mcp",
    "https://[::ffff:127.0.0.1]/mcp", "https://0.0.0.0/mcp", "https://224.0.0.1/mcp", "https://100.64.0.1/mcp",
])
async def test_non_public_addresses_are_refused(url: str) -> None:
    with pytest.raises(UrlRefused):
        await check(url, NONE)


@pytest.mark.parametrize("url", [
    "ftp://example.com/", "file:///etc/passwd", "https://user:pw@example.com/mcp", "https://example.com/mcp#x",
    "https:///mcp", "https://exa mple.com/mcp", "http://example.com/mcp", "https://ex\u0430mple.com/mcp",
    "https://example.com:99999/mcp",
])
def test_malformed_or_plaintext_urls_are_refused(url: str) -> None:
    with pytest.raises(UrlRefused):
        parse(url, NONE)


async def test_the_operator_allow_list_opens_hosts_and_networks() -> None:
    await check("http://127.0.0.1:8080/mcp", allow_list("127.0.0.1/32"))
    await check("http://localhost:8080/mcp", allow_list("localhost"))
    await check("https://10.1.2.3/mcp", allow_list("10.0.0.0/8, other.internal"))
    with pytest.raises(UrlRefused):
        await check("https://10.1.2.3/mcp", allow_list("192.168.0.0/16"))
    with pytest.raises(UrlRefused):  # an allowed network does not open plain http on another host
        parse("http://example.com/mcp", allow_list("127.0.0.0/8"))


def test_a_credential_is_sealed_for_one_connector_and_url() -> None:
    key = Fernet.generate_key().decode()
    auth = ClientCredentialsAuth(token_url="https://auth.example.com/token", client_id="c",
                                 client_secret=SecretStr("s3cret-value"))
    token = mcp_secrets.seal("crm", "https://crm.example.com/mcp", auth, key)
    assert b"s3cret-value" not in token and b"crm.example.com" not in token
    back = mcp_secrets.unseal("crm", "https://crm.example.com/mcp", token, key)
    assert isinstance(back, ClientCredentialsAuth) and back.client_secret.get_secret_value() == "s3cret-value"
    with pytest.raises(mcp_secrets.BadSecret):  # another connector's field
        mcp_secrets.unseal("other", "https://crm.example.com/mcp", token, key)
    with pytest.raises(mcp_secrets.BadSecret):  # the URL changed: never presented to the new server
        mcp_secrets.unseal("crm", "https://evil.example.com/mcp", token, key)
    with pytest.raises(mcp_secrets.BadSecret):
        mcp_secrets.unseal("crm", "https://crm.example.com/mcp", token, Fernet.generate_key().decode())
    rotated = f"{Fernet.generate_key().decode()},{key}"  # a new first key still reads the old tokens
    assert mcp_secrets.unseal("crm", "https://crm.example.com/mcp", token, rotated) == back
    with pytest.raises(mcp_secrets.NoSecretKey):
        mcp_secrets.seal("crm", "https://crm.example.com/mcp", auth, "")


def test_a_spec_never_echoes_its_credential() -> None:
    spec = McpConnectorSpec.model_validate({"url": "https://x.example.com/mcp", "description": "d",
                                            "auth": {"type": "bearer", "token": "tok-SECRET"}})
    assert "tok-SECRET" not in repr(spec) and "tok-SECRET" not in spec.model_dump_json()
    with pytest.raises(ValidationError) as bad:
        McpConnectorSpec.model_validate({"url": "https://x.example.com/mcp", "description": "d",
                                         "auth": {"type": "bearer", "token": "tok-SECRET", "extra": 1}})
    assert "tok-SECRET" not in bad.value.json(include_input=False)
    assert isinstance(TypeAdapter(McpAuth).validate_python({"type": "bearer", "token": "t"}), BearerAuth)


def test_tool_names_fit_the_provider_and_are_stable() -> None:
    import re
    taken: set[str] = set()
    for remote in ("get-sum", "trigger-long-running-operation", "Get.Sum", "9lives", "---", "get_sum"):
        name = local_name(remote, taken)
        assert re.fullmatch(TOOL_NAME, name), name
        assert name not in taken
        taken.add(name)
    assert local_name("trigger-long-running-operation", set()) == local_name("trigger-long-running-operation", set())


def tool(name: str, schema: dict[str, Any] | None = None, description: str | None = "does it") -> Tool:
    return Tool(name=name, description=description, input_schema=schema or {"type": "object", "properties": {}})


def test_tools_are_sorted_checked_and_limited() -> None:
    bad = {"type": "object", "properties": {"tags": {"type": "array"}}}  # no `items`: the provider refuses it
    tools = [tool("zeta"), tool("alpha"), tool("broken", bad), tool("no-text", description=None)]
    offered, names, skipped = convert(tools, None, 12.0)
    assert [t.name for t in offered] == ["alpha", "no_text", "zeta"] and names["no_text"] == "no-text"
    assert offered[0].timeout_s == 12.0 and offered[1].description == "The tool no-text."
    assert [s.name for s in skipped] == ["broken"] and "items" in skipped[0].why
    same, _, _ = convert(list(reversed(tools)), None, 12.0)  # the server's order does not matter
    assert same == offered
    many = [tool(f"t{i:02d}") for i in range(MAX_TOOLS + 3)]
    offered, _, skipped = convert(many, None, 30)
    assert len(offered) == MAX_TOOLS and len(skipped) == 3 and "limit" in skipped[0].why
    offered, _, skipped = convert(many, ["t05", "missing"], 30)
    assert [t.name for t in offered] == ["t05"] and [s.name for s in skipped] == ["missing"]


def test_results_read_as_text_notes_and_a_cut() -> None:
    result = CallToolResult(content=[
        TextContent(type="text", text="first"),
        ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
        EmbeddedResource(type="resource", resource=TextResourceContents(uri="file:///a.txt", text="inside")),
    ], is_error=False)
    out = result_text(result)
    assert out.startswith("first\n[an image (image/png") and "[resource file:///a.txt]\ninside" in out
    structured = CallToolResult(content=[], structured_content={"b": 1, "a": [1]}, is_error=False)
    assert json.loads(result_text(structured)) == {"a": [1], "b": 1}
    long = result_text(CallToolResult(content=[TextContent(type="text", text="y" * 50_000)], is_error=False), 1000)
    assert len(long) <= 1000 and "cut by the harness" in long
    assert "without text" in result_text(CallToolResult(content=[], is_error=True))
