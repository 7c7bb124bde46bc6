"""The ui wing (docs/architecture.md "Walking through the code")."""
