"""A long transcript's whole-file scans in a child process (docs/architecture.md "How a session wakes").

An index rebuild (shared/history/transcript_index.py) and a branch read by offset (a rewind to an old
entry, shared/history/transcript_branch.py) scan the whole file: one Python loop per line (orjson, the
tree row, the facts), ~20 s at 1 GB. Run in the I/O pool, that thread holds the GIL all along but for
the interpreter's 5-ms switches, and the event loop, which gives the GIL up at every poll and socket
call, waits out a switch interval to get it back each time: every session streaming on the worker
slowed down while one dormant session woke (bench-history's wake with the index gone: a 10 MB scan
held the loop 140-180 ms). In a child the pool thread only waits for the child's exit, the GIL
released; what comes back is the scan's small result (the index, written by the child; a branch's
nodes and tail, pickled on a pipe from our own child). When anything goes wrong the caller scans in
its own thread.

The index rebuild's child runs the same `rebuild` (the same atomic writes of the ids file and the
index, while the waking runtime holds the session's disk fence and waits for it); the caller reads it
back with `read_index`, which checks it against the file. A child that outlives its parent (killed
meanwhile) can at worst write an index and ids file of a prefix of the append-only file, which the
crash rules accept (the tail after it is folded, or the index rebuilt). Files under `APART_BYTES` are
scanned in the thread: a session past its first compaction (~200 KB) has an index, so a rebuild there
is a crash's or a session written before the index, and a child's start (~0.3 s of imports) is no
loop time, only the caller's.

The children: `python -m shared.history.transcript_index TRANSCRIPT` and `python -m
shared.history.transcript_branch TRANSCRIPT ENTRY_ID` (`as_child`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import structlog

from shared.history.transcript_scan import file_size

log = structlog.get_logger()

APART_BYTES = 2 << 20  # ~40 ms of scan
ROOT = Path(__file__).resolve().parents[2]  # the child imports this tree's modules, whatever the cwd
NICE = 5  # the loops' sessions first, but a wake or a rewind is a user's wait: not an offload job's nice 19
INDEX_CHILD = "shared.history.transcript_index"
BRANCH_CHILD = "shared.history.transcript_branch"


def in_child(module: str, transcript: Path, *args: str) -> bytes | None:
    """The pickled result of `module`'s child on `transcript`; None when the file is small (the caller
    scans in its own thread) or the child failed (logged; the caller scans likewise)."""
    if file_size(transcript) < APART_BYTES:
        return None
    try:
        done = subprocess.run([sys.executable, "-m", module, str(transcript), *args], cwd=ROOT,  # noqa: S603 - our own module
                              stdin=subprocess.DEVNULL, capture_output=True, check=False)
    except OSError as exc:
        log.warning("transcript_scan_child_failed", module=module, path=str(transcript), error=repr(exc))
        return None
    if done.returncode != 0:
        log.warning("transcript_scan_child_failed", module=module, path=str(transcript), code=done.returncode,
                    stderr=done.stderr[-2000:].decode(errors="replace"))
        return None
    return done.stdout


def loads(raw: bytes | None) -> tuple[bool, object]:
    """(True, the child's result) or (False, None) when there is none or it does not unpickle."""
    if raw is None:
        return False, None
    try:
        return True, pickle.loads(raw)  # noqa: S301 - our own child's stdout, never a client's bytes
    except Exception as exc:  # noqa: BLE001 - the caller scans in its own thread instead
        log.warning("transcript_scan_child_unreadable", error=repr(exc))
        return False, None


def as_child(work: Callable[..., object]) -> None:
    """A child's whole work: `work(transcript path, *args)` from argv, its result pickled on stdout, at
    a lower priority than the loops it keeps the GIL for. Anything the work prints goes to stderr.
    No cyclic collections: each would walk every row kept so far (shared/history/transcript_scan.py),
    and the child's cycles end with it."""
    gc.disable()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, max(NICE, os.getpriority(os.PRIO_PROCESS, 0)))
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    result = work(Path(sys.argv[1]), *sys.argv[2:])
    out.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    out.flush()
