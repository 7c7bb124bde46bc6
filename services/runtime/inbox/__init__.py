"""One session's inbox handled: the dispatcher, the causal gate, an injection delivered, idle recording, the
dormant manifest, forwarded live writes, a model switch, abort and interrupt.

See docs/architecture.md "Walking through the code"."""
