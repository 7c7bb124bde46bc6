"""The transcript read and reasoned about: tree, scan, index, branch, repair, model context, tokens, summary rules,
rewind and fork, scoped knowledge.

See docs/architecture.md "How a session wakes"."""
