"""The mcp wing (docs/architecture.md "Walking through the code")."""
