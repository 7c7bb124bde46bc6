"""What every service process has: health, readiness, metrics endpoints, heartbeats, the internal port, request
limits, heap and GC policy, the model client factory.

See docs/architecture.md "Walking through the code"."""
