"""Putting a snapshot's state back on a session disk (docs/architecture.md "Snapshots, rewind and fork").

`restore` makes the disk match a manifest in O(entries that differ): it compares the manifest with
the disk's current one (a fresh stat-based scan) and writes only what differs: entries the target
does not have are removed (deepest first), then missing directories, files and links are made
(shallowest first). Workspace entries are opened beneath the workspace root (shared/storage/workspace_fs.py),
never through a link a sandboxed command planted; files are written atomically from the object store.
Idempotent: a restore cut short by a crash is finished by running it again. Keys are shown names
(shared/storage/pathnames.py), turned back into the bytes on the disk here; modes are written without setuid,
setgid or sticky bits (shared/storage/snapshot_scan.py `permissions`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from shared.storage import workspace_fs
from shared.storage.disk import atomic_write_bytes, remove_durably
from shared.storage.pathnames import unshow
from shared.storage.snapshot_scan import Item, Manifest, fsync_paths, object_path, permissions
from shared.storage.sparse import copy_sparse

MAX_REMOVE_ENTRIES = 100_000  # an unrecorded tree (too deep or large to snapshot) is removed up to this


class MissingObject(Exception):
    """A content the manifest names is not in the object store (pruned meanwhile)."""


def in_scope(key: str, scopes: tuple[str, ...]) -> bool:
    return any(key == s or (s.endswith("/") and key.startswith(s)) for s in scopes)


@dataclass(frozen=True)
class Restored:
    changed: int  # entries removed or written
    manifest: Manifest  # the disk's state now, each written file with its new stat (SnapshotStore.adopt)


def restore(root: Path, objects: Path, current: Manifest, target: Manifest, scopes: tuple[str, ...]) -> Restored:
    """Make the disk under `root` match `target` for the keys in `scopes`. Each directory written in is
    fsync'd once, after its entries."""
    cur = {k: v for k, v in current.items() if in_scope(k, scopes)}
    want = {k: v for k, v in target.items() if in_scope(k, scopes)}
    remove = [k for k, v in cur.items() if k not in want or want[k].kind != v.kind
              or (v.kind == "l" and want[k].ref != v.ref)]
    removed = set(remove)
    make = [k for k, v in want.items() if k not in cur or k in removed or _differs(cur[k], v)]
    for key in make:  # before anything is touched
        if want[key].kind == "f" and not object_path(objects, want[key].ref).exists():
            raise MissingObject(f"snapshot content for {key!r} is no longer stored")
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    after = dict(current)
    dirs: set[tuple[str, ...]] = set()
    staged: list[tuple[str, list[str], str]] = []  # (key, parts, temp name): files written, not yet renamed
    with workspace_fs.workspace_root(workspace) as ws:
        for key in sorted(remove, key=lambda k: k.count("/"), reverse=True):
            _remove(root, ws, key, cur[key], dirs)
            after.pop(key, None)
        try:
            for key in sorted(make, key=lambda k: k.count("/")):
                after[key] = _make(root, ws, objects, key, want[key], dirs, staged)
            fsync_paths([workspace.joinpath(*parts[:-1], tmp) for _, parts, tmp in staged])
            while staged:
                key, parts, tmp = staged[0]
                after[key] = _rename_staged(ws, parts, tmp, after[key])
                staged.pop(0)
        finally:
            for _, parts, tmp in staged:  # left only when something failed before its rename
                with contextlib.suppress(OSError):
                    os.unlink(workspace.joinpath(*parts[:-1], tmp))
        # fsync only (no read, no write): a path swapped for a link meanwhile cannot be abused through it
        with contextlib.suppress(OSError):
            fsync_paths([workspace.joinpath(*d) for d in sorted(dirs, key=len, reverse=True)])
    return Restored(len(remove) + len(make), after)


def _differs(have: Item, want: Item) -> bool:
    if want.kind == "f":
        return have.ref != want.ref or permissions(have.mode) != permissions(want.mode)
    return have.ref != want.ref


def _ws_parts(key: str) -> list[str] | None:
    """A workspace key's names on the disk."""
    return [unshow(p) for p in key.split("/")[1:]] if key.startswith("workspace/") else None


def _disk_key(key: str) -> str:
    return unshow(key)


def _remove(root: Path, ws: int, key: str, item: Item, dirs: set[tuple[str, ...]]) -> None:
    parts = _ws_parts(key)
    if parts is None:
        remove_durably(root / _disk_key(key))
        return
    try:
        parent = workspace_fs.open_beneath(ws, parts[:-1], os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # its directory is gone already
    try:
        if item.kind == "d":
            _remove_tree(parent, parts[-1])
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(parts[-1], dir_fd=parent)
        dirs.add(tuple(parts[:-1]))
    finally:
        os.close(parent)


def _remove_tree(parent: int, name: str) -> None:
    """rmdir, or, for a directory that still holds entries no snapshot recorded (FIFOs, too deep),
    an iterative bounded removal of what is in it."""
    try:
        os.rmdir(name, dir_fd=parent)
        return
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    removed = 0
    stack: list[tuple[list[str], bool]] = [([name], False)]
    while stack and removed < MAX_REMOVE_ENTRIES:
        parts, emptied = stack.pop()
        if emptied:
            with contextlib.suppress(OSError):
                up = workspace_fs.open_beneath(parent, parts[:-1], os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.rmdir(parts[-1], dir_fd=up)
                finally:
                    os.close(up)
            continue
        try:
            fd = workspace_fs.open_beneath(parent, parts, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        stack.append((parts, True))
        try:
            with os.scandir(fd) as it:
                names = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            for sub, is_dir in names:
                removed += 1
                if is_dir:
                    stack.append(([*parts, sub], False))
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(sub, dir_fd=fd)
        finally:
            os.close(fd)


def _make(root: Path, ws: int, objects: Path, key: str, item: Item, dirs: set[tuple[str, ...]],
          staged: list[tuple[str, list[str], str]]) -> Item:
    """Make one entry. A workspace file is only written to a temp file beside it (`staged`): the
    caller fsyncs all of them together, then renames each (`_rename_staged`)."""
    parts = _ws_parts(key)
    if parts is None:
        atomic_write_bytes(root / _disk_key(key), object_path(objects, item.ref).read_bytes())
        return _with_stat(item, os.lstat(root / _disk_key(key)))
    parent = workspace_fs.open_dir(ws, parts[:-1], create=True)
    try:
        name = parts[-1]
        if item.kind == "d":
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, permissions(item.mode) or 0o755, dir_fd=parent)
        elif item.kind == "l":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=parent)
            os.symlink(unshow(item.ref), name, dir_fd=parent)
        else:
            staged.append((key, parts, _stage_from_object(parent, name, object_path(objects, item.ref),
                                                          permissions(item.mode) or 0o644)))
        dirs.add(tuple(parts[:-1]))
        return item
    finally:
        os.close(parent)


def _with_stat(item: Item, st: os.stat_result) -> Item:
    return Item(item.kind, item.ref, st.st_size, item.mode, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _stage_from_object(dir_fd: int, name: str, source: Path, mode: int) -> str:
    """The object's content in a new temp file beside `name` (not yet fsync'd); returns its name."""
    st = _lstat(dir_fd, name)
    if st is not None and stat.S_ISDIR(st.st_mode):
        _remove_tree(dir_fd, name)
    tmp = workspace_fs.TEMP_PREFIX + secrets.token_hex(8) + workspace_fs.TEMP_SUFFIX
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with open(source, "rb") as src:  # holes stay holes (shared/storage/sparse.py)
            copy_sparse(src.fileno(), out, os.fstat(src.fileno()).st_size)
        os.fchmod(out, mode)
    finally:
        os.close(out)
    return tmp


def _rename_staged(ws: int, parts: list[str], tmp: str, item: Item) -> Item:
    parent = workspace_fs.open_beneath(ws, parts[:-1], os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.replace(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        return _with_stat(item, os.stat(parts[-1], dir_fd=parent, follow_symlinks=False))
    finally:
        os.close(parent)


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
