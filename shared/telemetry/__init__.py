"""The telemetry wing (docs/architecture.md "Walking through the code")."""
