"""The workspace quota after a bash call (shared/storage/quota.py: bytes, files, entries, depth).

RLIMIT_FSIZE already stops any single file at the byte quota while the command runs. After the call
the whole workspace is measured with the bounded walk (shared/storage/walk.py). Entries nested deeper than
the depth bound are removed (nothing can be put there any other way). If the workspace is over its
quota, the entries the call created are removed (a new directory as a whole: its subtree is not
walked, only removed), so it is back to what it held before, apart from files the call grew; the model
is told so in the tool result. If it is still over (the call grew existing files, or the workspace was
already past what a walk can measure, so what the call created cannot be told apart), the result
says so: the file tools and HTTP PUT refuse writes until entries are deleted.

Everything here blocks on the disk: the bash tool runs it in the I/O pool.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from shared.storage.pathnames import unshow
from shared.storage.quota import Usage, WorkspaceQuota
from shared.storage.walk import Walk, WalkLimits, remove_tree, walk

SHOWN = 20
REMOVAL_BUDGET_S = 60.0  # removing what a call created: it may be as large as the call could make
CREATED_SCAN_ENTRIES = 1_000_000  # the scan for created entries lists new names without walking them
DEEP_ROUNDS = 8  # each round removes up to shared.storage.walk.TOO_DEEP_SHOWN too-deep subtrees


@dataclass
class QuotaReport:
    usage: Usage
    quota: WorkspaceQuota
    removed: list[str] = field(default_factory=list)
    too_deep: list[str] = field(default_factory=list)
    still_over: bool = False

    def message(self) -> str:
        q, u = self.quota, self.usage
        if u.over_counts(q):
            text = (f"[workspace quota exceeded: the call left {u.bytes} bytes, {u.files} files and "
                    f"{'more than ' if not u.complete else ''}{u.entries} entries; {q.describe()}.")
        else:
            text = "[workspace depth exceeded:"
        if self.too_deep:
            text += (f" {len(self.too_deep)} entries nested deeper than {q.max_depth} levels were removed: "
                     f"{_names(self.too_deep)}.")
        if self.removed:
            text += f" The {len(self.removed)} entries this call created were removed: {_names(self.removed)}."
        if self.still_over:
            text += " The workspace is still over quota: delete entries before writing more."
        return text + "]"


def _names(rels: list[str]) -> str:
    return ", ".join(r[:200] for r in rels[:SHOWN]) + (" ..." if len(rels) > SHOWN else "")


def enforce(root: Path, before: Walk, after: Walk, quota: WorkspaceQuota) -> QuotaReport | None:
    """Bring the workspace back within its bounds after a call; None when it already is."""
    usage = Usage.of(after)
    if not usage.over(quota):
        return None
    report = QuotaReport(usage, quota)
    limits = quota.limits
    rounds = 0
    while after.deeper and rounds < DEEP_ROUNDS:
        for rel in after.too_deep:
            if _remove(root, rel):
                report.too_deep.append(rel)
        after, rounds = walk(root, limits), rounds + 1
    usage = Usage.of(after)
    if usage.over(quota) and before.complete and not before.deeper:
        existed = {e.rel for e in before.entries}
        for rel in _created(root, existed, {e.rel for e in before.entries if e.kind == "directory"}):
            if _remove(root, rel):
                report.removed.append(rel)
        usage = Usage.of(walk(root, limits))
    report.still_over = usage.over(quota)
    return report


def _created(root: Path, existed: set[str], dirs: set[str]) -> list[str]:
    """Entries not in `existed`, found by walking only the directories that existed: a new directory
    is one name, whatever it holds. Largest first is unknown without walking them: names in order."""
    found = walk(root, WalkLimits(CREATED_SCAN_ENTRIES, 512, REMOVAL_BUDGET_S), descend=dirs.__contains__)
    return [e.rel for e in found.entries if e.rel not in existed]


def _remove(root: Path, rel: str) -> bool:
    """Remove root/rel (a whole subtree) through O_NOFOLLOW directory fds: a concurrent command of the
    same session that swaps a directory for a symlink cannot turn this into a delete elsewhere."""
    *dirs, name = [unshow(part) for part in rel.split("/")]  # a walk's rel is shown (shared/storage/pathnames.py)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        for part in dirs:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return remove_tree(fd, name, budget_s=REMOVAL_BUDGET_S).finished
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
