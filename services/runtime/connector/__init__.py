"""The session's connectors: the catalog it may use, their calls and answers, MCP calls (docs/architecture.md
"Connectors")."""
