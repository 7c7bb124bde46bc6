"""The streams wing (docs/architecture.md "Walking through the code")."""
