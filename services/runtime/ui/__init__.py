"""The session's UI state: the live SessionUIState document, its file and events, viewable files, forms, cost
records.

See docs/architecture.md "Walking through the code"."""
