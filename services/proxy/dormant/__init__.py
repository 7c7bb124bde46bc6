"""A dormant session served from its disk: preview, transcript pages, export, erase, the disk budget, the UI
document's checks (docs/architecture.md "Ownership")."""
