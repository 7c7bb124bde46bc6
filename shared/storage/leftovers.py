"""Temp files of failed atomic writes that the session disk would not let go of (EIO, EROFS: the
removal fails like the write did). They are remembered here, per process, and removed by
`sweep_leftover_temps` once the disk takes writes again (shared/serving/diskhealth.py runs it before it reports
the disk ok), so no partial file stays visible (README "Reliability")."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

_LEFTOVERS: set[Path] = set()
LEFTOVERS_MAX = 10_000


def discard_temp(path: Path, unlink: Callable[[], None]) -> None:
    """Remove a failed write's temp file now, or remember it for the sweep when the disk refuses."""
    try:
        unlink()
    except FileNotFoundError:
        pass
    except OSError:
        if len(_LEFTOVERS) < LEFTOVERS_MAX:
            _LEFTOVERS.add(path)


def leftover_temps() -> int:
    return len(_LEFTOVERS)


def sweep_leftover_temps() -> int:
    """Remove the remembered temp files (blocking: run it in a thread); how many are still there."""
    for path in list(_LEFTOVERS):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            continue
        _LEFTOVERS.discard(path)
    return len(_LEFTOVERS)


def fd_path(dir_fd: int) -> Path:
    """Where a held directory is now: only to remove our own temp file (a name with 64 random bits)
    later, when the disk refused its removal at once."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{dir_fd}"))
    except OSError:
        return Path("/nonexistent")
