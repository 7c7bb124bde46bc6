"""Process-tree helpers (Linux /proc): which processes a supervisor started, and are they gone."""

from __future__ import annotations

import os
from pathlib import Path


def _ppid_and_state(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after the last ')'.
    rest = stat[stat.rindex(")") + 2 :].split()
    return int(rest[1]), rest[0]


def descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _ppid_and_state(int(entry))
            if info is not None:
                children.setdefault(info[0], []).append(int(entry))
    out: dict[int, str] = {}
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out[child] = cmdline(child)
            stack.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\x00", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running (a zombie that nobody reaped yet counts as exited)."""
    info = _ppid_and_state(pid)
    return info is not None and info[1] != "Z"
