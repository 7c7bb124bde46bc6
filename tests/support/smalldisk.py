"""A small session disk for fault tests: a tmpfs of a few megabytes (and a few inodes) that a test can
fill to the last byte or inode, remount read-only, and give back.

Mounting needs root (CI and the developers' machines run as root); `available()` says whether this
machine can, so a test skips with a reason rather than failing where it cannot. Every mount is undone
in `unmount()` (lazily, bounded), which the fixtures call in their teardown whatever happened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BALLAST = ".ballast"  # the files that fill the disk, at the mount's root (outside every session)
CHUNK = 256 * 1024


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=20, check=False)


def available() -> str | None:
    """None when tmpfs mounts work here; else why not."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    return None


@dataclass
class SmallDisk:
    mountpoint: Path
    size_mb: int = 48
    inodes: int = 4096

    def mount(self) -> SmallDisk:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        done = _run("mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,nr_inodes={self.inodes},mode=0755",
                    "tmpfs", str(self.mountpoint))
        if done.returncode != 0:
            raise RuntimeError(f"mount tmpfs failed: {done.stderr.strip()}")
        return self

    def unmount(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            if _run("umount", str(self.mountpoint)).returncode != 0:
                _run("umount", "-l", str(self.mountpoint))

    def remount(self, mode: str) -> None:
        """`ro` or `rw`."""
        done = _run("mount", "-o", f"remount,{mode}", str(self.mountpoint))
        if done.returncode != 0:
            raise RuntimeError(f"remount {mode} failed: {done.stderr.strip()}")

    @property
    def ballast(self) -> Path:
        return self.mountpoint / BALLAST

    def fill_bytes(self, leave: int = 0) -> int:
        """Write ballast until the disk answers ENOSPC, then give `leave` bytes back (a nearly full
        disk: small writes pass, a large one does not); the bytes the ballast holds."""
        self.ballast.mkdir(exist_ok=True)
        written = 0
        block = b"\0" * CHUNK
        fd = os.open(self.ballast / f"bytes-{len(os.listdir(self.ballast))}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (CHUNK, 4096, 1):
                try:
                    while True:
                        written += os.write(fd, block[:size])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
            if leave:
                written = max(written - leave, 0)
                os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - min(leave, os.lseek(fd, 0, os.SEEK_END)))
        finally:
            os.close(fd)
        return written

    def fill_inodes(self) -> int:
        """Create empty ballast files until the disk runs out of inodes; how many."""
        self.ballast.mkdir(exist_ok=True)
        made = 0
        while True:
            try:
                (self.ballast / f"inode-{made}").touch()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return made
            made += 1

    def free(self) -> None:
        """Remove every ballast file: the space and inodes come back."""
        if not self.ballast.exists():
            return
        for name in os.listdir(self.ballast):
            (self.ballast / name).unlink()

    def free_bytes(self) -> int:
        st = os.statvfs(self.mountpoint)
        return st.f_bavail * st.f_frsize


@contextlib.contextmanager
def small_disk(mountpoint: Path, size_mb: int = 48, inodes: int = 4096) -> Iterator[SmallDisk]:
    disk = SmallDisk(mountpoint, size_mb, inodes).mount()
    try:
        yield disk
    finally:
        disk.unmount()
