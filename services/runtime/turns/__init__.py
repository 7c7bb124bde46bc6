"""What goes into a turn: TurnOrder, the delivery table, attachments, scoped knowledge, skill rules, the prompt cache
key (docs/architecture.md "Walking through the code")."""
