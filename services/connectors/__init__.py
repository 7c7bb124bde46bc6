"""Connector services: outside services that offer tools to the agent (docs/architecture.md "Connectors")."""
