"""One run and its recovery: the supervisor, the recorder, acks, turn-start pacing, a reply's outcome, compaction's
runtime side, subagents, the tools' host, spending.

See docs/architecture.md "Walking through the code"."""
