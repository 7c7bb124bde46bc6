"""The session disk as the runtime writes it: the transcript and its window, todo, snapshots, a live rewind, what
the agent last read, the WriteGuard.

See docs/architecture.md "Walking through the code"."""
