"""What crosses a stream: one module per stream's payload (wake, inbox, events, lifecycle, artifact
changes, injections recorded, compaction, notifications, dead letters) and the causal markers
(docs/architecture.md "Streams")."""
