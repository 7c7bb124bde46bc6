"""The harness's MCP client as the conformance suite drives it (`conformance client --command ...`):
`python -m tests.support.mcp_conformance_client [--pin VERSION] URL`, the scenario in
`MCP_CONFORMANCE_SCENARIO`. `--pin` connects as the harness's calls do once a server's revision is
known (no probe: 2026-07-28 directly, or the 2025-11-25 handshake).

It does what the harness does with a server (shared/mcp/mcp_client.py, shared/mcp/mcp_tools.py): connect
(probe 2026-07-28, fall back to the 2025-11-25 handshake), list every tool, check them like a
connector's, and call each offered tool once. Arguments are the model's part in the harness; here a
tool's required numbers get 2 and 3, its strings "x". Exits non-zero on any failure.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from shared.mcp.mcp_client import Reach, connect, list_all
from shared.mcp.mcp_tools import convert, result_text
from shared.mcp.mcp_urls import allow_list


def arguments(schema: dict[str, Any]) -> dict[str, Any]:
    numbers = iter((2, 3, 4, 5))
    out: dict[str, Any] = {}
    for name in schema.get("required", []):
        kind = schema.get("properties", {}).get(name, {}).get("type")
        out[name] = next(numbers) if kind in ("number", "integer") else "x"
    return out


async def main(url: str, pin: str | None) -> None:
    reach = Reach(url=url, auth=None, allowed=allow_list("localhost 127.0.0.1 ::1"), max_bytes=4 * 1024 * 1024)
    async with connect(reach, pin, 20) as client:
        offered, names, _ = convert(await list_all(client, 500), None, 20)
        print(f"protocol {client.protocol_version}, tools {sorted(names.values())}")
        for tool in offered:
            result = await client.call_tool(names[tool.name], arguments(tool.parameters), read_timeout_seconds=20)
            print(f"{names[tool.name]}: {result_text(result)[:200]}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[-1], sys.argv[sys.argv.index("--pin") + 1] if "--pin" in sys.argv else None))
