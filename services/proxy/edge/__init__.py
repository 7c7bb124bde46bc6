"""What every request of the proxy meets: JSON errors, body caps, heavy-request bounds, the SSE response,
metrics, rate quotas.

See docs/architecture.md "Walking through the code"."""
