"""The edge wing (docs/architecture.md "Walking through the code")."""
