"""The media wing (docs/architecture.md "Walking through the code")."""
