"""The session disk: layout, atomic writes, workspace paths, walks, quotas, blobs, snapshots (docs/architecture.md
"Walking through the code")."""
