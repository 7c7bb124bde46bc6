"""The errors of the session disk, each mapped to an HTTP status (shared/storage/disk.py re-exports them): a bad
path, a missing file, a conflict, a full or failing disk (README "Reliability")."""

from __future__ import annotations

import errno
import os


class DiskError(Exception):
    """Base for errors the HTTP layer turns into a 4xx."""

    status = 400


class PathRefused(DiskError):
    status = 400


class TooLarge(DiskError):
    status = 413


class NotFound(DiskError):
    status = 404


class Conflict(DiskError):
    """The path exists as something else: a directory where a file is written, a file as a parent."""

    status = 409


class InsufficientStorage(DiskError):
    """The disk or the session's workspace quota is full."""

    status = 507
    cause: str | None = None


class DiskFull(InsufficientStorage):
    """The session disk itself has no space or no inodes left (ENOSPC, EDQUOT): a retry once space is
    freed succeeds (README "Reliability")."""

    cause = "disk_full"


class DiskUnavailable(DiskError):
    """The session disk fails the operation (EIO, a stale or lost mount) or is read-only (EROFS): a
    clear 503, never a 500 and never a hang; the request may be retried once the disk is back."""

    status = 503

    def __init__(self, message: str, cause: str = "disk_io_error"):
        super().__init__(message)
        self.cause = cause


FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
UNAVAILABLE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ESTALE, errno.ENOTCONN})


def storage_fault(exc: BaseException, what: str = "") -> DiskError | None:
    """The 507 or 503 for an OS error of the disk itself (full, failing, read-only); None for any other
    error. The message names the cause and never a host path."""
    if not isinstance(exc, OSError) or exc.errno is None:
        return None
    name = errno.errorcode.get(exc.errno, str(exc.errno))
    suffix = f" writing {what}" if what else ""
    if exc.errno in FULL_ERRNOS:
        return DiskFull(f"the session disk is full ({name}: {os.strerror(exc.errno)}){suffix}; retry once space is freed")
    if exc.errno == errno.EROFS:
        return DiskUnavailable(f"the session disk is read-only (EROFS){suffix}; retry later", "disk_read_only")
    if exc.errno == errno.ENOTCONN and exc.filename is None:
        return None  # a socket's (a Redis connection going away), not a lost mount: no file named
    if exc.errno in UNAVAILABLE_ERRNOS:
        return DiskUnavailable(f"the session disk failed the operation ({name}: {os.strerror(exc.errno)}){suffix}; "
                               "retry later")
    return None
