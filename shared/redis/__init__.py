"""The redis wing (docs/architecture.md "Walking through the code")."""
