"""What goes into a turn: the pending queue and the turn builder, the delivery table, attachments, scoped
knowledge, skill rules, the prompt cache key.

See docs/architecture.md "Walking through the code"."""
