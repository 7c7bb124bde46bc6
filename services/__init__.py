"""The five Gamma harness services. Each is started with `python -m services.<name>`."""
