"""An MCP server's tools as a connector's tools, and its results as the model reads them
(docs/integration.md "MCP connectors").

Tools: sorted by the server's name (the order the server sends is not the prompt's order: a server
that reshuffles its list must not change the request bytes), each given a provider-facing name that
fits `TOOL_NAME` (`get-sum` -> `get_sum`; a long or clashing name is cut and suffixed with a hash of
the server's name, so the same server name always maps to the same tool name), its argument schema
checked exactly like a registered connector's (shared/mcp/connectors.py `schema_errors`: JSON Schema
2020-12, the provider's function-calling subset, bounded checks). A tool that fails is skipped and
said so in the registration's answer (`mcp.skipped`); the others stay.

Results: the text blocks in order; other blocks as one-line notes (an image, a resource link, a
binary resource: what and how big, never their bytes); `structuredContent` as JSON when the server
sent no text; the whole cut at the connector's result limit. The text is the server's: it goes to
the model as a tool result, neutralised like every tool result (shared/trust/neutralise.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from mcp.types import CallToolResult, EmbeddedResource, ImageContent, ResourceLink, TextContent, Tool

from shared.contracts.records.connectors import MAX_RESULT_CHARS, MAX_TOOLS, ConnectorTool, SkippedTool
from shared.mcp.connectors import schema_errors

_NOT_NAME = re.compile(r"[^a-z0-9_]+")
MAX_NAME = 21  # TOOL_NAME: a letter and at most 20 more


def local_name(remote: str, taken: set[str]) -> str:
    """A provider-facing name for the server's `remote`, unique among `taken`."""
    base = _NOT_NAME.sub("_", remote.lower()).strip("_") or "tool"
    if not base[0].isalpha():
        base = "t_" + base
    digest = hashlib.sha256(remote.encode()).hexdigest()
    if len(base) <= MAX_NAME and base not in taken:
        return base
    for width in (6, 10, 16):
        name = f"{base[:MAX_NAME - width - 1].rstrip('_')}_{digest[:width]}"
        if name not in taken:
            return name
    raise ValueError(f"no free name for the tool {remote!r}")


def _description(tool: Tool) -> str:
    text = (tool.description or tool.title or f"The tool {tool.name}.").strip() or f"The tool {tool.name}."
    return text if len(text) <= 1024 else text[:1020] + " …"


def convert(tools: Sequence[Tool], wanted: Sequence[str] | None, timeout_s: float
            ) -> tuple[list[ConnectorTool], dict[str, str], list[SkippedTool]]:
    """(the tools to offer, provider name -> server name, the ones skipped and why)."""
    by_name = {t.name: t for t in tools}
    skipped = [SkippedTool(name=n[:200], why="the server does not offer this tool")
               for n in (wanted or ()) if n not in by_name]
    chosen = sorted(by_name) if wanted is None else sorted(n for n in set(wanted) if n in by_name)
    out: list[ConnectorTool] = []
    names: dict[str, str] = {}
    for remote in chosen:
        tool = by_name[remote]
        if len(out) >= MAX_TOOLS:
            skipped.append(SkippedTool(name=remote[:200], why=f"past the limit of {MAX_TOOLS} tools per connector; "
                                       "name the tools to offer in `tools`"))
            continue
        schema = dict(tool.input_schema or {"type": "object"})
        problems = schema_errors(len(out), schema)
        if problems:
            skipped.append(SkippedTool(name=remote[:200], why=str(problems[0]["msg"])[:500]))
            continue
        name = local_name(remote, set(names))
        names[name] = remote
        out.append(ConnectorTool(name=name, description=_description(tool), parameters=schema, timeout_s=timeout_s))
    return out, names, skipped


def _note(block: object) -> str:
    if isinstance(block, ImageContent):
        return f"[an image ({block.mime_type}, {len(block.data) * 3 // 4} bytes) the harness does not show]"
    if isinstance(block, ResourceLink):
        return f"[a resource link: {block.uri} ({block.name})]"
    if isinstance(block, EmbeddedResource):
        res = block.resource
        text = getattr(res, "text", None)
        if isinstance(text, str):
            return f"[resource {res.uri}]\n{text}"
        return f"[a binary resource {res.uri} ({res.mime_type or 'unknown type'}) the harness does not show]"
    kind = getattr(block, "type", "unknown")
    return f"[a {kind} block the harness does not show]"


def result_text(result: CallToolResult, limit: int = MAX_RESULT_CHARS) -> str:
    parts = [b.text if isinstance(b, TextContent) else _note(b) for b in result.content]
    if not any(isinstance(b, TextContent) for b in result.content) and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True))
    text = "\n".join(parts) or ("(the tool reported an error without text)" if result.is_error else "(no output)")
    if len(text) > limit:
        cut = limit - 120
        text = text[:cut] + f"\n[cut by the harness: {len(text) - cut} more characters of the server's answer]"
    return text
