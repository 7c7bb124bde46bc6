"""Compaction: structured summaries on request; writes no session file (results go to the inbox)."""
