"""Free TCP ports for the servers a test starts, safe when pytest-xdist runs several test processes.

`services.stack.free_port` asks the kernel for an ephemeral port and releases it, so two processes
asking at once can be handed the same port before either server binds it, and an outgoing connection
can take it in between. Under xdist each worker therefore hands out ports from a slice of its own below
the kernel's ephemeral range (32768+ on Linux), skipping any that is taken; a single test process
uses the kernel's choice.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

from services.stack import free_port as kernel_free_port

SLICE_START = 20000
SLICE_SIZE = 600
MAX_WORKERS = 20  # slices end below 32000

# A random start: a child process of the worker (which inherits its worker name) begins elsewhere.
_counter = itertools.count(random.randrange(SLICE_SIZE))


def xdist_worker() -> int | None:
    """This process's xdist worker number (gw3 -> 3), or None outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    worker = xdist_worker()
    if worker is None or worker >= MAX_WORKERS:
        return kernel_free_port()
    first = SLICE_START + worker * SLICE_SIZE
    for _ in range(SLICE_SIZE):
        port = first + next(_counter) % SLICE_SIZE
        if _bindable(port):
            return port
    return kernel_free_port()
