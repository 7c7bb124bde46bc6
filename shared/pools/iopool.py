"""The event loop's default executor, sized for blocking I/O rather than CPU.

`asyncio.to_thread` and `run_in_executor(None, ...)` share the loop's default executor, which Python
sizes min(32, cpus + 4): 6 threads on a 2-core machine. Every service puts its disk waits there (the
runtime: the transcript's fsync of each recorded message, content blob reads, a sandboxed command's
`wait`; the proxy: blob staging with its fsync, transcript pages; the digest: revisions and the
manifest). Those threads mostly wait on the disk, not the CPU, so the default size lets a few slow fsyncs hold
up every other thread's work. bench-e2e (200 sessions, back to back, 64 vs 6 threads): a live file
write's staged-blob read 9 / 61 ms (p50 / p99) vs 15 / 80, file save -> answer 164 / 673 vs 228 /
1,322 ms; a small gain next to the load client's own queue (docs/architecture.md "Streaming at scale"), not the main one.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor


def install_io_executor(threads: int) -> ThreadPoolExecutor:
    """Make a pool of `threads` the running loop's default executor (threads start on demand)."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="io")
    asyncio.get_running_loop().set_default_executor(pool)
    return pool
