"""The inbox wing (docs/architecture.md "Walking through the code")."""
