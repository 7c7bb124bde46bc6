"""The storage wing (docs/architecture.md "Walking through the code")."""
