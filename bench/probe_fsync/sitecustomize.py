"""Bench-only fsync counter (docs/capacity.md): a process started with this directory first on its
PYTHONPATH and GAMMA_FSYNC_COUNT_DIR set counts its `os.fsync` calls (every thread) and keeps the
count in GAMMA_FSYNC_COUNT_DIR/<pid>, rewritten in place after each call (one pwrite beside a sync
that costs a disk flush). bench-stream reads the runtime's count before and after its phase: the
fsyncs per prompt of the capacity model. The services call `os.fsync` through the module attribute
(shared/storage/disk.py, shared/storage/snapshots.py, ...), so the wrapper sees every call.
"""

from __future__ import annotations

import os
import threading

_DIR = os.environ.get("GAMMA_FSYNC_COUNT_DIR")

if _DIR:
    _real = os.fsync
    _lock = threading.Lock()
    _count = [0]
    _out = os.open(os.path.join(_DIR, str(os.getpid())), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def _counted(fd: object) -> None:
        _real(fd)  # type: ignore[arg-type]
        with _lock:
            _count[0] += 1
            os.pwrite(_out, b"%-20d" % _count[0], 0)

    os.fsync = _counted  # type: ignore[assignment]
