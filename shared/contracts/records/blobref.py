"""Patterns of a content blob reference (shared/storage/blobs.py): its name and its SHA-256."""

BLOB_NAME = r"^[A-Za-z0-9_-]{1,64}$"
SHA256 = r"^[0-9a-f]{64}$"
