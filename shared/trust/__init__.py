"""The trust wing (docs/architecture.md "Walking through the code")."""
