"""The one rule of a SessionUIState document, its Yjs form and merge, forms, checklists, and the one write model
(docs/architecture.md "Ownership")."""
