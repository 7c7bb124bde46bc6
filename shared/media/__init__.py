"""Images of the conversation: checks, limits, tokens, storage, collection (docs/architecture.md "Images")."""
