"""What a live session is: its state, inbox queue and pending injections, the lease and disk fence, the outbox and
the worker's event sender.

See docs/architecture.md "The runtime's parts"."""
