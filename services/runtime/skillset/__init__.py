"""The skillset wing (docs/architecture.md "Walking through the code")."""
