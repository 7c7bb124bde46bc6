"""Copies that keep a sparse file sparse: its holes take no disk in the copy either (a 90 MB file of
holes copied by every snapshot and fork would otherwise cost 90 MB of disk each time).

`copy_sparse` copies only the data ranges SEEK_DATA / SEEK_HOLE report (copy_file_range inside the
kernel) and sets the size at the end, so trailing holes stay holes; a file system without them
reports the whole file as data and the copy is the plain one. `write_sparse` is for a copy made
chunk by chunk (the snapshot store hashes as it copies): an all-zero chunk is skipped, not written.
"""

from __future__ import annotations

import errno
import os

ZERO = memoryview(bytes(1024 * 1024))


def copy_sparse(src: int, dst: int, size: int) -> None:
    """`size` bytes of the open file `src` into the empty open file `dst`, holes kept."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(src, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no data past `pos`, only a hole to the end
                raise
            break
        end = min(os.lseek(src, start, os.SEEK_HOLE), size)
        while start < end:
            n = os.copy_file_range(src, dst, end - start, start, start)
            if n == 0:
                break
            start += n
        pos = end
        if n == 0:
            break
    os.ftruncate(dst, size)


def write_sparse(out: int, chunk: bytes) -> None:
    """Append `chunk` at the file position of `out`, as a hole when it is all zeros (the caller
    truncates to the final size once done, so a trailing hole counts)."""
    if len(chunk) <= len(ZERO) and ZERO[:len(chunk)] == chunk:
        os.lseek(out, len(chunk), os.SEEK_CUR)
    else:
        os.write(out, chunk)
