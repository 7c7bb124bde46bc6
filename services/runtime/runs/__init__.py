"""The runs wing (docs/architecture.md "Walking through the code")."""
