"""The AG-UI run: its input, shared state, event stream and translation (docs/integration.md "AG-UI")."""
