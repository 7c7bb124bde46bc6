"""A long transcript's index rebuilt in a child process (docs/architecture.md "How a session wakes").

A rebuild scans the whole file: one Python loop per line (orjson, the tree row, the facts), ~20 s at
1 GB. Run in the I/O pool, that thread holds the GIL all along but for the interpreter's 5-ms switches,
and the event loop, which gives the GIL up at every poll and socket call, waits out a switch interval
to get it back each time: every session streaming on the worker slows down while one dormant session
wakes (bench-history's wake with the index gone). In a child the pool thread only waits for the
child's exit, the GIL released. The child runs the same `rebuild` (the same atomic writes of the ids
file and the index, while the waking runtime holds the session's disk fence and waits for it); the
caller then reads the index back with `read_index`, which checks it against the file, and scans in
its own thread when anything went wrong. A child that outlives its parent (killed meanwhile) can at
worst write an index and ids file of a prefix of the append-only file, which the crash rules accept
(the tail after it is folded, or the index rebuilt). Files under `APART_BYTES` are scanned in the
thread: a session past its first compaction has an index, so a rebuild there is a crash's or a session
written before the index, and a child's start (~0.3 s of imports) is no loop time, only the wake's.

`python -m shared.history.transcript_index TRANSCRIPT` is the child (`as_child`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import structlog

from shared.history.transcript_scan import file_size

log = structlog.get_logger()

APART_BYTES = 2 << 20  # ~40 ms of scan; a session past its first compaction (~200 KB) has an index
ROOT = Path(__file__).resolve().parents[2]  # the child imports this tree's modules, whatever the cwd
NICE = 5  # the loop's sessions first, but a wake is a user's wait: not an offload job's nice 19
CHILD = "shared.history.transcript_index"


def rebuild_in_child(transcript: Path) -> bool:
    """True once a child rebuilt the index and wrote it; False when the file is small or the child
    failed (the caller rebuilds in its own thread)."""
    if file_size(transcript) < APART_BYTES:
        return False
    try:
        done = subprocess.run([sys.executable, "-m", CHILD, str(transcript)], cwd=ROOT,  # noqa: S603 - our own module
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    except OSError as exc:
        log.warning("index_rebuild_child_failed", path=str(transcript), error=repr(exc))
        return False
    if done.returncode != 0:
        log.warning("index_rebuild_child_failed", path=str(transcript), code=done.returncode,
                    stderr=done.stderr[-2000:].decode(errors="replace"))
        return False
    return True


def as_child(rebuild: Callable[[Path], object]) -> None:
    """The child's whole work: `rebuild` (shared/history/transcript_index.py's, which calls this as its
    `__main__`) of the path it was given, at a lower priority than the loops it keeps its GIL for."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, max(NICE, os.getpriority(os.PRIO_PROCESS, 0)))
    rebuild(Path(sys.argv[1]))
