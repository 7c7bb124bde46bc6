"""The serving wing (docs/architecture.md "Walking through the code")."""
