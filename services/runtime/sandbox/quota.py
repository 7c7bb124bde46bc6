"""The workspace quota after a bash call (bytes and regular files, as the settings
GAMMA_WORKSPACE_MAX_BYTES / GAMMA_WORKSPACE_MAX_FILES say).

RLIMIT_FSIZE already stops any single file at the byte quota while the command runs. After the call
the whole workspace is measured; if it is over, the files the call created are removed (it is then
back to what it held before, apart from files the call grew), and the model is told so in the tool
result. If it is still over (the call grew existing files), the result says so: the file tools and
HTTP PUT refuse writes until files are deleted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

SHOWN = 20


@dataclass
class QuotaReport:
    bytes_used: int
    files_used: int
    max_bytes: int
    max_files: int
    removed: list[str] = field(default_factory=list)
    still_over: bool = False

    def message(self) -> str:
        text = (f"[workspace quota exceeded: the call left {self.bytes_used} bytes in {self.files_used} files; "
                f"the quota is {self.max_bytes} bytes and {self.max_files} files.")
        if self.removed:
            names = ", ".join(self.removed[:SHOWN]) + (" ..." if len(self.removed) > SHOWN else "")
            text += f" The {len(self.removed)} files this call created were removed: {names}."
        if self.still_over:
            text += " The workspace is still over quota: delete files before writing more."
        return text + "]"


def listing(root: Path) -> dict[str, int]:
    """Regular files under root (symlinks not followed): relative path -> size."""
    out: dict[str, int] = {}
    if not root.is_dir():
        return out
    stack = [(root, "")]
    while stack:
        path, prefix = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            rel = prefix + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append((Path(entry.path), rel + "/"))
                elif entry.is_file(follow_symlinks=False):
                    out[rel] = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return out


def enforce(root: Path, existed: set[str], max_bytes: int, max_files: int) -> QuotaReport | None:
    files = listing(root)
    used, count = sum(files.values()), len(files)
    if used <= max_bytes and count <= max_files:
        return None
    report = QuotaReport(used, count, max_bytes, max_files)
    for rel in sorted(set(files) - existed, key=lambda r: -files[r]):
        try:
            _unlink_beneath(root, rel)
        except OSError:
            continue
        report.removed.append(rel)
        used -= files[rel]
        count -= 1
    report.still_over = used > max_bytes or count > max_files
    return report


def _unlink_beneath(root: Path, rel: str) -> None:
    """Unlink root/rel through O_NOFOLLOW directory fds: a concurrent command of the same session that
    swaps a directory for a symlink cannot turn this into a delete elsewhere."""
    *dirs, name = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in dirs:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)
