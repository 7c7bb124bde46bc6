"""The turns wing (docs/architecture.md "Walking through the code")."""
