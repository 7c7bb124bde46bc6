"""Artifact digest builder: revisions, coalesced digests, the dormant artifact manifest."""
