"""The session's UI state: the live SessionUIState document, its file and events, viewable files, forms, cost records
(docs/architecture.md "Walking through the code")."""
