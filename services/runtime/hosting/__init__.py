"""The worker and what it hosts sessions with: the shard read, leases, wakes, its fair share, the model-call
machinery its sessions share, and one live session's composition root.

See docs/architecture.md "Walking through the code"."""
