"""The store wing (docs/architecture.md "Walking through the code")."""
