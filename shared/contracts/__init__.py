"""Wire contracts: what crosses a stream (streams/), what is kept and named (records/), the HTTP bodies
(http.py) and MCP (mcp.py)."""
