"""Which failures a retry can fix (docs/architecture.md "Limits on hostile input").

A Redis failure or a network-level OS error passes (a restart, a dropped connection): the entry is
retried in place. Anything else, including an OS error from the disk that no retry changes (a name too
long, a directory where a file goes, a file where a directory goes), fails its entry at once: a waiting
client is answered with a clear status, the entry is dead-lettered and acked, and nothing queued behind
it waits. Unknown errnos are permanent: a retry loop is only for failures known to pass.
"""

from __future__ import annotations

import errno

from redis.exceptions import RedisError

from shared.storage.disk import DiskError, DiskFull, DiskUnavailable, storage_fault
from shared.storage.workspace_fs import disk_error

TRANSIENT_ERRNOS = frozenset({
    errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.EIO, errno.ENOMEM, errno.ENFILE, errno.EMFILE,
    errno.ENOSPC, errno.EDQUOT, errno.ESTALE, errno.ETIMEDOUT, errno.EPIPE, errno.ECONNRESET,
    errno.ECONNREFUSED, errno.ECONNABORTED, errno.ENETDOWN, errno.ENETUNREACH, errno.EHOSTUNREACH,
})


def disk_fault(exc: BaseException) -> DiskError | None:
    """The 507/503 when `exc` is the session disk being full, failing or read-only; else None.
    Such a failure passes when the disk does (README "Reliability"): an entry nobody waits on is
    retried until it does, a client waiting on a write is answered with it at once."""
    if isinstance(exc, DiskFull | DiskUnavailable):
        return exc
    return storage_fault(exc)


def transient(exc: BaseException) -> bool:
    if isinstance(exc, RedisError | ConnectionError | TimeoutError):
        return True
    if disk_fault(exc) is not None:
        return True
    if isinstance(exc, OSError):
        return exc.errno is None or exc.errno in TRANSIENT_ERRNOS
    return False


def refusal(exc: BaseException) -> tuple[int, str]:
    """The status and message for a client whose request failed for good."""
    fault = disk_fault(exc)
    if fault is not None:
        return fault.status, str(fault)
    if isinstance(exc, DiskError):
        return exc.status, str(exc)
    if isinstance(exc, OSError):
        mapped = disk_error(exc, "")  # its status only: the message must not carry a host path
        if mapped is not None:
            return mapped.status, f"the runtime could not apply this request: {exc.strerror}"
    return 500, f"the runtime could not apply this request: {type(exc).__name__}"
