"""The costs wing (docs/architecture.md "Walking through the code")."""
