"""The hosting wing (docs/architecture.md "Walking through the code")."""
