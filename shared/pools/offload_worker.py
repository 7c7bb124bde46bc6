"""A worker of shared/pools/offload.py: `python -m shared.pools.offload_worker MEMORY_BYTES [WARM]`.

It limits its own address space first, lowers its own CPU priority, runs WARM (a "module:function",
when given), says it is ready (an empty frame), then answers framed, pickled `("module:function", args,
cpu_s)` requests on stdin with `("ok", result)` or `("err", exception)` on stdout, one at a time, until
stdin closes. A job may use `cpu_s` seconds of CPU (RLIMIT_CPU, whole seconds, rounded up): past them
the kernel ends the worker with SIGXCPU, which the parent reads as the job's time budget spent. Only its parent writes to its stdin (the requests are the service's own, never a client's).
Anything the job prints goes to stderr: stdout carries the replies only.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import pickle
import resource
import struct
import sys
from typing import Any, BinaryIO

FRAME = struct.Struct(">Q")
NICE = 19


def _read(src: BinaryIO, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        chunk = src.read(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def _call(name: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    module, _, attr = name.partition(":")
    try:
        return "ok", getattr(importlib.import_module(module), attr)(*args)
    except MemoryError:
        return "err", MemoryError("the job went past the worker's memory limit")
    except Exception as exc:  # noqa: BLE001 - the caller gets its job's own exception
        return "err", exc


def lower_priority() -> None:
    """A tenant's job yields the CPU to the service's own loop (docs/architecture.md "Bounded work"):
    nice 19 gives it 15/1024 of a core against a loop at nice 0, and SCHED_BATCH means a waking loop
    preempts it at once instead of waiting out the job's time slice. Its budget is CPU time (below),
    so a job slowed by the loop's turns is not cut short for it."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, max(NICE, os.getpriority(os.PRIO_PROCESS, 0)))
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def _cpu_budget(cpu_s: float | None) -> None:
    """The job may use `cpu_s` more seconds of CPU (None: no limit)."""
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if cpu_s is None:
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
        return
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(used.ru_utime + used.ru_stime + max(cpu_s, 0.001))
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    lower_priority()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print cannot corrupt the replies
    if len(sys.argv) > 2 and sys.argv[2]:
        _call(sys.argv[2], ())
    replies.write(FRAME.pack(0))
    replies.flush()
    requests = sys.stdin.buffer
    while True:
        head = _read(requests, FRAME.size)
        if head is None:
            return
        body = _read(requests, FRAME.unpack(head)[0])
        if body is None:
            return
        name, args, cpu_s = pickle.loads(body)
        _cpu_budget(cpu_s)
        status, value = _call(name, args)
        _cpu_budget(None)
        try:
            out = pickle.dumps((status, value), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - an unpicklable exception still answers
            out = pickle.dumps(("err", RuntimeError(f"{type(value).__name__}: {value}"[:500])))
            del exc
        replies.write(FRAME.pack(len(out)) + out)
        replies.flush()


if __name__ == "__main__":
    main()
