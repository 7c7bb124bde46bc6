"""The pools wing (docs/architecture.md "Walking through the code")."""
