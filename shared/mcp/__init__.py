"""Connectors and MCP: the registry, ACLs, argument and tool schemas, the MCP client, its secrets and URLs
(docs/architecture.md "Connectors")."""
