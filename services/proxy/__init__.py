"""The data-plane proxy: the public API, liveness routing, dormant disk access, the wake sequence."""
