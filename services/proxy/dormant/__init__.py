"""The dormant wing (docs/architecture.md "Walking through the code")."""
