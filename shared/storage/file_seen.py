"""The workspace files' content the agent saw, from a transcript entry as JSON: the fold the
transcript index keeps for the active branch before the live window (shared/history/transcript_index.py
`base_seen`), so a wake after a compaction still knows what the agent read or wrote before it
(services/runtime/store/file_reads.py: "a wake or a compaction keeps it").
"""

from __future__ import annotations

from typing import Any

from shared.storage.disk import DiskError, split_workspace_path

TOOLS = ("read", "write", "edit")


def seen_change(d: dict[str, Any]) -> dict[str, str | None] | None:
    """path -> the hash seen (None: the file was removed) from one entry; None when it records none."""
    m = d.get("message")
    if d.get("type") != "message" or not isinstance(m, dict) or m.get("role") != "toolResult":
        return None
    tool, details = m.get("toolName"), m.get("details")
    if not isinstance(details, dict) or (m.get("isError") and tool != "bash"):
        return None
    if tool in TOOLS and isinstance(details.get("sha256"), str) and "skill" not in details:
        try:
            path = "/".join(split_workspace_path(str(details.get("path", ""))))
        except DiskError:
            return None
        return {path: details["sha256"]}
    if tool == "bash" and isinstance(files := details.get("files"), dict):
        return {str(p): sha if isinstance(sha, str) else None for p, sha in files.items()}
    return None


def fold_seen(seen: dict[str, str], change: dict[str, str | None]) -> None:
    for path, sha in change.items():
        seen.pop(path, None)
        if sha is not None:
            seen[path] = sha  # last seen last (services/runtime/store/file_reads.py `recent`)
