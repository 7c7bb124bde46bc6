"""A worker of shared/pools/offload.py: `python -m shared.pools.offload_worker MEMORY_BYTES [WARM]`.

It limits its own address space first, runs WARM (a "module:function", when given), says it is ready
(an empty frame), then answers framed, pickled `("module:function", args)`
requests on stdin with `("ok", result)` or `("err", exception)` on stdout, one at a time, until stdin
closes. Only its parent writes to its stdin (the requests are the service's own, never a client's).
Anything the job prints goes to stderr: stdout carries the replies only.
"""

from __future__ import annotations

import importlib
import os
import pickle
import resource
import struct
import sys
from typing import Any, BinaryIO

FRAME = struct.Struct(">Q")
NICE = 10


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


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # A tenant's job yields the CPU to the service's own loop: on a busy host the scheduler runs the
    # loop (every session's round trips) first, the validation or decode with what is left.
    os.nice(NICE)
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
        name, args = pickle.loads(body)
        status, value = _call(name, args)
        try:
            out = pickle.dumps((status, value), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - an unpicklable exception still answers
            out = pickle.dumps(("err", RuntimeError(f"{type(value).__name__}: {value}"[:500])))
            del exc
        replies.write(FRAME.pack(len(out)) + out)
        replies.flush()


if __name__ == "__main__":
    main()
