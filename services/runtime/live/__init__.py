"""The live wing (docs/architecture.md "Walking through the code")."""
