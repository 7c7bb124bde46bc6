"""A FUSE passthrough for the disk-fault tests: a directory mounted elsewhere, with latency added to
fsync and to metadata operations, and EIO on demand (README "Reliability").

    python -m tests.support.slowfs SOURCE MOUNTPOINT CONTROL

CONTROL is a JSON file read every 50 ms: `{"fsync_ms": 20, "meta_ms": 5, "eio": false, "erofs": false}`.
With `eio` true every operation but statfs fails with EIO (a network filesystem whose server went
away); with `erofs` every change fails with EROFS (a share turned read-only under open files, which a
local `mount -o remount,ro` refuses while any file is open for writing). The
process stops by itself when the mount goes away (`fusermount -u` / `umount -l`) or on SIGTERM, and
`SlowFs` (the fixtures' handle) always unmounts it, bounded, in its `stop`.

Built on fusepy (libfuse2: Debian's `libfuse2`, installed by .ci/run); `available()` says why it
cannot run here, so a test skips rather than fails on a machine without FUSE.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLL_S = 0.05


def available() -> str | None:
    """None when a FUSE passthrough can be mounted here; else why not."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if os.geteuid() != 0:
        return "mounting FUSE here needs root"
    if shutil.which("fusermount") is None and shutil.which("fusermount3") is None:
        return "no fusermount"
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as exc:  # no libfuse.so.2: OSError from ctypes
        return f"fusepy/libfuse2 not installed: {exc}"
    return None


class Faults:
    """The control file's current settings, refreshed by a thread."""

    def __init__(self, control: Path) -> None:
        self.control = control
        self.fsync_s = 0.0
        self.meta_s = 0.0
        self.eio = False
        self.erofs = False
        self.read()
        threading.Thread(target=self._poll, daemon=True, name="slowfs-control").start()

    def read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            raw = json.loads(self.control.read_text())
            self.fsync_s = float(raw.get("fsync_ms", 0)) / 1000
            self.meta_s = float(raw.get("meta_ms", 0)) / 1000
            self.eio = bool(raw.get("eio", False))
            self.erofs = bool(raw.get("erofs", False))

    def _poll(self) -> None:
        while True:
            time.sleep(POLL_S)
            self.read()


def _operations(source: str, faults: Faults) -> Any:
    from fuse import FuseOSError, Operations

    def real(path: str) -> str:
        return source + path

    changes = {"mknod", "mkdir", "rmdir", "unlink", "symlink", "rename", "link", "chmod", "chown", "utimens",
               "truncate", "create", "write"}

    def guarded(delay: Callable[[], float]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            def run(self: Any, path: str, *args: Any) -> Any:
                if faults.eio:
                    raise FuseOSError(errno.EIO)
                writes = fn.__name__ in changes or (fn.__name__ == "open" and args[0] & (os.O_WRONLY | os.O_RDWR))
                if faults.erofs and writes:
                    raise FuseOSError(errno.EROFS)
                wait = delay()
                if wait:
                    time.sleep(wait)
                try:
                    return fn(self, path, *args)
                except OSError as exc:
                    raise FuseOSError(exc.errno or errno.EIO) from None
            return run
        return wrap

    meta = guarded(lambda: faults.meta_s)
    sync = guarded(lambda: faults.fsync_s)
    data = guarded(lambda: 0.0)

    class Passthrough(Operations):
        @meta
        def access(self, path: str, mode: int) -> None:
            if not os.access(real(path), mode):
                raise FuseOSError(errno.EACCES)

        @meta
        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.lstat(real(path))
            keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid",
                    "st_ino")
            return {k: getattr(st, k) for k in keys}

        @meta
        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(real(path))]

        @meta
        def readlink(self, path: str) -> str:
            return os.readlink(real(path))

        @meta
        def mknod(self, path: str, mode: int, dev: int) -> None:
            os.mknod(real(path), mode, dev)

        @meta
        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(real(path), mode)

        @meta
        def rmdir(self, path: str) -> None:
            os.rmdir(real(path))

        @meta
        def unlink(self, path: str) -> None:
            os.unlink(real(path))

        @meta
        def symlink(self, target: str, source_path: str) -> None:
            os.symlink(source_path, real(target))

        @meta
        def rename(self, old: str, new: str) -> None:
            os.rename(real(old), real(new))

        @meta
        def link(self, target: str, source_path: str) -> None:
            os.link(real(source_path), real(target))

        @meta
        def chmod(self, path: str, mode: int) -> None:
            os.chmod(real(path), mode)

        @meta
        def chown(self, path: str, uid: int, gid: int) -> None:
            os.chown(real(path), uid, gid)

        @meta
        def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
            os.utime(real(path), times)

        @meta
        def truncate(self, path: str, length: int, fh: int | None = None) -> None:
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(real(path), length)

        @meta
        def open(self, path: str, flags: int) -> int:
            return os.open(real(path), flags)

        @meta
        def create(self, path: str, mode: int, fi: Any = None) -> int:
            # fusepy hides the caller's flags here: read-write serves every caller (O_RDWR | O_CREAT).
            return os.open(real(path), os.O_RDWR | os.O_CREAT, mode)

        @data
        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        @data
        def write(self, path: str, payload: bytes, offset: int, fh: int) -> int:
            return os.pwrite(fh, payload, offset)

        @data
        def flush(self, path: str, fh: int) -> None:
            return None

        def release(self, path: str, fh: int) -> None:
            os.close(fh)  # never refused: the kernel has already forgotten the file

        @sync
        def fsync(self, path: str, datasync: int, fh: int) -> None:
            os.fsync(fh)

        @sync
        def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
            return None

        def statfs(self, path: str) -> dict[str, Any]:
            st = os.statvfs(real(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                    "f_frsize", "f_namemax")
            return {k: getattr(st, k) for k in keys}

    return Passthrough()


def serve(source: Path, mountpoint: Path, control: Path) -> None:
    from fuse import FUSE

    FUSE(_operations(str(source.resolve()), Faults(control)), str(mountpoint), foreground=True, nothreads=False,
         use_ino=True, attr_timeout=1.0, entry_timeout=1.0, allow_other=True)  # the sandbox runs in a user namespace


# ---------------------------------------------------------------- the fixtures' handle


@dataclass
class SlowFs:
    source: Path
    mountpoint: Path
    control: Path
    proc: subprocess.Popen[bytes] | None = None

    def set(self, *, fsync_ms: float = 0, meta_ms: float = 0, eio: bool = False, erofs: bool = False) -> None:
        """Change the faults; in force within POLL_S (a rename: the reader never sees half a file)."""
        tmp = self.control.with_suffix(".new")
        tmp.write_text(json.dumps({"fsync_ms": fsync_ms, "meta_ms": meta_ms, "eio": eio, "erofs": erofs}))
        os.replace(tmp, self.control)
        time.sleep(POLL_S * 3)  # past the next read of the control file

    def start(self, *, fsync_ms: float = 0, meta_ms: float = 0, timeout_s: float = 15) -> SlowFs:
        self.source.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.control.write_text(json.dumps({"fsync_ms": fsync_ms, "meta_ms": meta_ms, "eio": False}))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.slowfs", str(self.source),
                                      str(self.mountpoint), str(self.control)],
                                     cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout_s
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None and self.proc.stderr else ""
                self.stop()
                raise RuntimeError(f"slowfs did not mount: {err[-2000:]}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Unmount (lazily if busy) and end the process, bounded."""
        for cmd in (["fusermount", "-u", str(self.mountpoint)], ["umount", "-l", str(self.mountpoint)]):
            if not os.path.ismount(self.mountpoint):
                break
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(cmd, capture_output=True, timeout=10, check=False)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@contextlib.contextmanager
def slow_fs(root: Path, *, fsync_ms: float = 0, meta_ms: float = 0) -> Iterator[SlowFs]:
    fs = SlowFs(root / "source", root / "mnt", root / "control.json")
    fs.start(fsync_ms=fsync_ms, meta_ms=meta_ms)
    try:
        yield fs
    finally:
        fs.stop()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
