"""What goes into a turn: TurnOrder, the delivery table, attachments, scoped knowledge, skill rules, the prompt
cache key.

See docs/architecture.md "Walking through the code"."""
