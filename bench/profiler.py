"""One profiler process per sampled service, for the benches that profile while they load the stack
(bench-e2e `--py-spy`, bench-stream `--py-spy`/`--perf`)."""

from __future__ import annotations

import asyncio
from pathlib import Path


async def record(py_spy: str, pid: int, out: Path, seconds: int, rate: int = 50, *,
                 nonblocking: bool = False, perf: bool = False) -> asyncio.subprocess.Process:
    """Start sampling `pid` for `seconds` into `out` (py-spy's collapsed stacks, `-f raw`); with `perf`,
    Linux perf with call graphs into `out`'s `.perf.data` instead (native frames: uvloop, the
    interpreter, syscalls; `perf script` reads it). `nonblocking`: py-spy does not pause the process
    to sample it. The caller awaits the returned process."""
    if perf:
        cmd = ["perf", "record", "-F", str(rate), "-g", "-p", str(pid), "-o", str(out.with_suffix(".perf.data")),
               "--", "sleep", str(seconds)]
    else:
        cmd = [py_spy, "record", "-p", str(pid), "-d", str(seconds), "-r", str(rate),
               *(["--nonblocking"] if nonblocking else []), "-f", "raw", "-o", str(out)]
    return await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)
