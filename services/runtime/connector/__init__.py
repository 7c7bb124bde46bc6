"""The connector wing (docs/architecture.md "Walking through the code")."""
