"""The state a workspace snapshot records, read from the session disk (docs/architecture.md
"Snapshots, rewind and fork").

A manifest maps a key (a path relative to the session directory: `workspace/…`, `documents/{doc}.json`,
`todo.json`, `state.json`) to an `Item`: a regular file by content hash, a directory, or a symbolic
link by its target. Reading it is stat-based: a file whose size, mtime_ns, ctime_ns and inode match
the previous manifest keeps its hash unread, so a scan costs a stat per entry and a read of each
changed file only. The workspace is hostile (a sandboxed command made it): the walk is iterative,
bounded in entries and depth, opens every directory beneath the workspace root (never through a
link), and never follows a link; FIFOs, sockets and devices are not recorded. Keys and link targets
are shown names (shared/storage/pathnames.py: bytes that are not UTF-8 escaped, so a record is always JSON), and
a mode keeps its permission bits only: never setuid, setgid or sticky (a restore writes as the service's
own user, root under `make run`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from shared.storage import workspace_fs
from shared.storage.pathnames import show
from shared.storage.sparse import write_sparse

MAX_DEPTH = 64  # the default; SnapshotLimits follows GAMMA_WORKSPACE_MAX_DEPTH
CHUNK = 1024 * 1024
ROOT_FILES = ("todo.json", "state.json")
FSYNC_THREADS = 8
# Up to this many, one after another in the calling thread: handing two or three to the fsync threads
# cost more CPU (their wake-ups and the GIL) than the commits they share (bench/README.md "bench-e2e",
# fourth pass).
SERIAL_FSYNCS = 3


class Item(NamedTuple):
    kind: str  # "f" file, "d" directory, "l" symbolic link
    ref: str  # a file's sha256, a link's target, "" for a directory
    size: int = 0
    mode: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    ino: int = 0

    def same_stat(self, st: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                                                        st.st_ino)


Manifest = dict[str, Item]
Store = Callable[[int, str], tuple[str, int]]  # (dir fd, name) -> (sha256, bytes newly stored)


def permissions(mode: int) -> int:
    """The mode a snapshot records and a restore writes: rwx bits only (no setuid, setgid, sticky)."""
    return mode & 0o777


class ScanTooLarge(Exception):
    """The workspace has more entries (or deeper directories) than a snapshot records."""


class Scan(NamedTuple):
    manifest: Manifest
    added_bytes: int  # bytes of objects this scan stored for the first time


def scan_session(root: Path, previous: Manifest, store: Store, max_entries: int, max_depth: int = MAX_DEPTH) -> Scan:
    """The manifest of a session directory now: its workspace tree, documents, todo and UI state.
    ScanTooLarge past `max_entries` entries or `max_depth` levels of directories."""
    out: Manifest = {}
    added = 0
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in ROOT_FILES:
            added += _record_file(root_fd, name, name, previous, out, store)
        with _opened_dir(root_fd, "documents") as docs:
            if docs is not None:
                added += _scan_flat(docs, "documents/", previous, out, store, max_entries)
        with _opened_dir(root_fd, "workspace") as ws:
            if ws is not None:
                added += _scan_tree(ws, previous, out, store, max_entries, max_depth)
    finally:
        os.close(root_fd)
    return Scan(out, added)


@contextlib.contextmanager
def _opened_dir(dir_fd: int, name: str):  # type: ignore[no-untyped-def]
    try:
        fd: int | None = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            raise
        fd = None
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def _record_file(dir_fd: int, name: str, key: str, previous: Manifest, out: Manifest, store: Store) -> int:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(st.st_mode):
        return 0
    return _file_item(dir_fd, name, key, st, previous, out, store)


def _file_item(dir_fd: int, name: str, key: str, st: os.stat_result, previous: Manifest, out: Manifest,
               store: Store) -> int:
    old = previous.get(key)
    if old is not None and old.kind == "f" and old.same_stat(st):
        out[key] = old
        return 0
    try:
        digest, added = store(dir_fd, name)
    except FileNotFoundError:  # removed while we walked
        return 0
    out[key] = Item("f", digest, st.st_size, permissions(st.st_mode), st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    return added


def _scan_flat(dir_fd: int, prefix: str, previous: Manifest, out: Manifest, store: Store, max_entries: int) -> int:
    added = 0
    with os.scandir(dir_fd) as it:
        for entry in it:
            if len(out) >= max_entries:
                raise ScanTooLarge(f"the session holds more than {max_entries} entries (the snapshot bound)")
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and entry.name.endswith(".json") and not entry.name.startswith("."):
                added += _file_item(dir_fd, entry.name, prefix + show(entry.name), st, previous, out, store)
    return added


def _scan_tree(ws_fd: int, previous: Manifest, out: Manifest, store: Store, max_entries: int, max_depth: int) -> int:
    """Iterative: a stack of directories (as their parts beneath the workspace), each opened beneath
    the workspace fd when its turn comes, so no more than two directory fds are open at a time."""
    added = 0
    stack: list[list[str]] = [[]]
    while stack:
        parts = stack.pop()
        try:
            fd = workspace_fs.open_beneath(ws_fd, parts, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue  # replaced or removed while we walked: the next snapshot sees what is there
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    if len(out) >= max_entries:
                        raise ScanTooLarge(f"the workspace holds more than {max_entries} entries (the snapshot bound)")
                    if entry.name.startswith(workspace_fs.TEMP_PREFIX):
                        continue  # an atomic write's temp file (workspace_fs, snapshot_restore): never state
                    added += _tree_entry(fd, entry, parts, previous, out, store, stack, max_depth)
        finally:
            os.close(fd)
    return added


def _tree_entry(fd: int, entry: os.DirEntry[str], parts: list[str], previous: Manifest, out: Manifest,
                store: Store, stack: list[list[str]], max_depth: int) -> int:
    key = show("workspace/" + "/".join([*parts, entry.name]))
    try:
        st = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return 0
    if stat.S_ISDIR(st.st_mode):
        if len(parts) + 1 > max_depth:
            raise ScanTooLarge(f"the workspace nests deeper than {max_depth} directories (the snapshot bound)")
        out[key] = Item("d", "", 0, permissions(st.st_mode))
        stack.append([*parts, entry.name])
        return 0
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            out[key] = Item("l", show(os.readlink(entry.name, dir_fd=fd)))
        return 0
    if stat.S_ISREG(st.st_mode):
        return _file_item(fd, entry.name, key, st, previous, out, store)
    return 0


# ---------------------------------------------------------------- the object store


def object_path(objects: Path, digest: str) -> Path:
    return objects / digest[:2] / digest[2:]


_POOL: ThreadPoolExecutor | None = None


def fsync_paths(paths: list[Path]) -> None:
    """fsync each file or directory, several at a time past a few: the journal commits concurrent
    fsyncs together, so 100 changed files cost a few commits, not 100."""
    global _POOL
    if not paths:
        return
    if len(paths) <= SERIAL_FSYNCS:
        for path in paths:
            _fsync_path(path)
        return
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=FSYNC_THREADS, thread_name_prefix="snapshot-fsync")
    list(_POOL.map(_fsync_path, paths))


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ObjectWriter:
    """The object store's writes for one snapshot, in two phases. `store` (the scan's Store) hashes a
    file while copying it to a temp file beside the objects, keeping the copy only when no object has
    that hash yet; `commit` fsyncs the kept copies (in parallel), renames each to its hash, then fsyncs
    each directory renamed into once. A record may name the objects only after `commit`: an object's
    name never points at content that is not durable."""

    def __init__(self, objects: Path) -> None:
        self.objects = objects
        self.pending: dict[str, tuple[Path, int]] = {}  # digest -> (temp copy, size)
        self._made = False  # `objects` exists

    def store(self, dir_fd: int, name: str) -> tuple[str, int]:
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        if not self._made:  # once a take, not once a file
            self.objects.mkdir(parents=True, exist_ok=True)
            self._made = True
        tmp = self.objects / f".tmp-{secrets.token_hex(8)}"
        keep = False
        try:
            if not stat.S_ISREG(os.fstat(src).st_mode):
                raise FileNotFoundError(name)  # swapped for something else since the stat
            digest, size = _copy_hashing(src, tmp)
            keep = digest not in self.pending and not object_path(self.objects, digest).exists()
            if keep:
                self.pending[digest] = (tmp, size)
            return digest, size if keep else 0
        finally:
            os.close(src)
            if not keep:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()

    def commit(self) -> None:
        fsync_paths([tmp for tmp, _ in self.pending.values()])
        dirs: set[Path] = set()
        for digest, (tmp, _) in self.pending.items():
            final = object_path(self.objects, digest)
            try:
                os.replace(tmp, final)
            except FileNotFoundError:  # the first object of its prefix: its directory is made then
                final.parent.mkdir(exist_ok=True)
                os.replace(tmp, final)
            dirs.add(final.parent)
        fsync_paths(sorted(dirs))
        self.pending.clear()

    def discard(self) -> None:
        for tmp, _ in self.pending.values():
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        self.pending.clear()


def _copy_hashing(src: int, tmp: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        while chunk := os.read(src, CHUNK):
            h.update(chunk)
            write_sparse(fd, chunk)  # an all-zero chunk stays a hole (shared/storage/sparse.py)
            size += len(chunk)
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    return h.hexdigest(), size
