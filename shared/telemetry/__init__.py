"""Logs, metrics and traces of every service (docs/architecture.md "Observability")."""
