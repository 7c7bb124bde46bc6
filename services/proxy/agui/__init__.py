"""The agui wing (docs/architecture.md "Walking through the code")."""
