"""Session runtime: the agent engine (Pi's semantics in Python) and the Gamma session protocol."""
