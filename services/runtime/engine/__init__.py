"""The agent engine: Pi's agent-core semantics in Python (pure loop + small stateful Agent)."""
