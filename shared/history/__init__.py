"""The history wing (docs/architecture.md "Walking through the code")."""
