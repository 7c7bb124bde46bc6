"""The session disk: layout, atomic writes, torn-tolerant JSON Lines, safe workspace paths.

Layout under GAMMA_DATA_DIR/sessions/{sid}/ (docs/architecture.md "Ownership" says which service writes each):
transcript.jsonl, todo.json, state.json, pending_artifacts.json, .revisions/, .images/{sha256}, workspace/**,
documents/{doc}.json
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from shared.disk_errors import (
    FULL_ERRNOS,
    UNAVAILABLE_ERRNOS,
    Conflict,
    DiskError,
    DiskFull,
    DiskUnavailable,
    InsufficientStorage,
    NotFound,
    PathRefused,
    TooLarge,
    storage_fault,
)
from shared.leftovers import discard_temp
from shared.pathnames import BadEscape, show, unshow
from shared.walk import WalkLimits, walk

T = TypeVar("T")

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
DOC_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# Workspace paths (docs/architecture.md "Limits on hostile input"): bytes of UTF-8, as the kernel counts them. A segment may use the whole
# NAME_MAX: the temp file of an atomic workspace write has a fixed-length name of its own
# (shared.workspace_fs.TEMP_NAME_BYTES), so no suffix is ever added to a client's name.
MAX_SEGMENT_BYTES = 255
MAX_PATH_BYTES = 1024
MAX_PATH_CHARS = MAX_PATH_BYTES  # an alias its importers use
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# The disk's errors are part of its interface: importers name them from here.
__all__ = ["FULL_ERRNOS", "UNAVAILABLE_ERRNOS", "Conflict", "DiskError", "DiskFull", "DiskUnavailable",
           "InsufficientStorage", "NotFound", "PathRefused", "TooLarge", "storage_fault"]


@dataclass(frozen=True)
class SessionPaths:
    root: Path

    @property
    def transcript(self) -> Path:
        return self.root / "transcript.jsonl"

    @property
    def todo(self) -> Path:
        return self.root / "todo.json"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def pending_artifacts(self) -> Path:
        return self.root / "pending_artifacts.json"

    @property
    def revisions(self) -> Path:
        return self.root / ".revisions"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def fence(self) -> Path:
        """The runtime's disk fence (services/runtime/diskfence.py): the newest lease holder's token."""
        return self.root / ".fence"

    @property
    def images(self) -> Path:
        """Images of the conversation by content hash (shared/images.py): written once, by whoever stores one."""
        return self.root / ".images"

    @property
    def documents(self) -> Path:
        return self.root / "documents"

    def document(self, doc: str) -> Path:
        if not DOC_ID.match(doc) or doc in {".", ".."}:
            raise PathRefused(f"invalid document id {doc!r}")
        return self.documents / f"{doc}.json"


def session_paths(data_dir: Path, sid: str) -> SessionPaths:
    if not SESSION_ID.match(sid):
        raise PathRefused(f"invalid session id {sid!r}")
    return SessionPaths(Path(data_dir) / "sessions" / sid)


# ---------------------------------------------------------------- atomic writes


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_durably(path: Path) -> bool:
    """Unlink `path` and fsync its directory (the removal survives a crash); False when it was absent."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    _fsync_dir(path.parent)
    return True


def _in_parent(path: Path, create: Callable[[], T]) -> T:
    """`create()` (which makes a file in `path`'s directory), the directory made first only when it is
    missing: a `mkdir(exist_ok=True)` before every write was two syscalls and a caught exception on
    each transcript append and atomic write (bench/README.md "bench-e2e")."""
    try:
        return create()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return create()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory: old or new, never torn."""
    fd, tmp = _in_parent(path, lambda: tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        discard_temp(Path(tmp), lambda: os.unlink(tmp))
        raise
    _fsync_dir(path.parent)


def atomic_write_json(path: Path, value: BaseModel | dict[str, Any] | list[Any]) -> None:
    if isinstance(value, BaseModel):
        data = value.model_dump_json(by_alias=True).encode()
    else:
        data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    atomic_write_bytes(path, data)


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------- JSON Lines


def append_jsonl(path: Path, records: list[dict[str, Any]], visible: Callable[[], None] | None = None) -> None:
    """Append whole lines; a torn last line left by a crash is cut off first. `visible` runs once the
    lines are in the file for every reader, before the fsync (the runtime's disk fence unlocks there)."""
    if not records:
        return
    fh = _appended(path, records, visible)
    with fh:
        os.fsync(fh.fileno())


def append_unsynced(path: Path, records: list[dict[str, Any]]) -> Any:
    """append_jsonl's write without its fsync: returns the file, open, with the lines in it for every
    reader; the caller hands it to `sync_and_close`. For a writer that must release a lock as soon as
    its lines are readable and not after their fsync (the runtime's transcript: write_guard.py)."""
    return _appended(path, records, None)


async def sync_and_close(fh: Any) -> None:
    """fsync `fh` in the I/O pool, then close it. Other tasks run meanwhile instead of the whole loop
    waiting for the disk (500 streaming sessions' turn starts and ends: 15% of the runtime's loop in
    fsync, bench-stream). A caller cancelled meanwhile does not stop the fsync (the file closes when it
    is done)."""
    try:
        done = asyncio.get_running_loop().run_in_executor(None, os.fsync, fh.fileno())
    except BaseException:
        fh.close()
        raise
    done.add_done_callback(lambda f: (fh.close(), f.cancelled() or f.exception()))
    await asyncio.shield(done)


def jsonl_line(record: dict[str, Any]) -> bytes:
    """One JSON Lines record as appended, without its newline."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()


def append_lines_unsynced(path: Path, lines: list[bytes]) -> tuple[Any, int]:
    """`append_unsynced` of lines serialized by the caller (`jsonl_line`): the open file and the offset
    the first line was written at (the transcript index records each line's span)."""
    return _write_payload(path, b"".join(line + b"\n" for line in lines), None)


def _appended(path: Path, records: list[dict[str, Any]], visible: Callable[[], None] | None) -> Any:
    """The file, open, with the lines written and flushed (`visible` has run): the caller fsyncs and closes."""
    return _write_payload(path, b"".join(jsonl_line(r) + b"\n" for r in records), visible)[0]


def _write_payload(path: Path, payload: bytes, visible: Callable[[], None] | None) -> tuple[Any, int]:
    # Unbuffered: a write the disk refuses part way (ENOSPC, EIO) is cut back to where it started, and
    # no buffered rest can land after the cut when the file closes: the file never keeps a torn or
    # partial batch, and a retry appends the whole batch once.
    fh = _in_parent(path, lambda: open(path, "a+b", buffering=0))  # noqa: SIM115 - closed by the caller after its fsync
    try:
        _repair_tail(fh)
        start = fh.seek(0, os.SEEK_END)
        try:
            view = memoryview(payload)
            while view:
                view = view[fh.write(view):]
        except OSError:
            with contextlib.suppress(OSError):
                fh.truncate(start)
            raise
        if visible is not None:
            visible()
    except BaseException:
        fh.close()
        raise
    return fh, start


def _repair_tail(fh: Any) -> None:
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    if size == 0:
        return
    fh.seek(size - 1)
    if fh.read(1) == b"\n":
        return
    # Walk back to the last newline; everything after it is a torn write.
    pos = size - 1
    chunk = 4096
    while pos > 0:
        start = max(0, pos - chunk)
        fh.seek(start)
        block = fh.read(pos - start)
        idx = block.rfind(b"\n")
        if idx >= 0:
            fh.truncate(start + idx + 1)
            fh.seek(0, os.SEEK_END)
            return
        pos = start
    fh.truncate(0)
    fh.seek(0)


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Complete lines only: a torn or unparsable last line is ignored."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    lines = raw.split(b"\n")
    if lines and lines[-1] != b"":
        lines = lines[:-1]  # no trailing newline: the last line is torn
    for line in lines:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            yield value


# ---------------------------------------------------------------- workspace paths


def _checked_text(rel: str, *, escapes: bool) -> str:
    """The path's text, NFC-normalised, once it is known to be UTF-8, relative and free of controls."""
    if not isinstance(rel, str) or not rel.strip():
        raise PathRefused("empty path")
    if len(rel) > 4 * MAX_PATH_BYTES:  # an escape is 4 characters for a byte: longer is too long whatever it holds
        raise PathRefused(f"path too long: {len(rel)} characters; the limit is {MAX_PATH_BYTES} bytes")
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PathRefused("path is not valid UTF-8") from exc
    # One name, one file: NFC and NFD spellings of a name must not be two files.
    rel = unicodedata.normalize("NFC", rel)
    if "\x00" in rel:
        raise PathRefused("path contains a NUL byte")
    if _CONTROL.search(rel):
        raise PathRefused("path contains a control character")
    if "\\" in rel and not escapes:
        raise PathRefused("backslashes are not allowed in paths (a file is never created with an escaped name: "
                          "docs/architecture.md \"Workspace names\")")
    if rel.startswith("/") or re.match(r"^[A-Za-z]:", rel) or rel.startswith("~"):
        raise PathRefused("absolute paths are not allowed")
    return rel


def split_workspace_path(rel: str, *, for_write: bool = False, escapes: bool | None = None) -> list[str]:
    """The validated, NFC-normalised segments of a client- or model-supplied workspace path, as the
    names on the disk (`os` takes them as they are; shared/pathnames.py `show` gives them back as text).

    Pure: no I/O, so a name that can never be written is refused before anything is touched.
    Refuses empty paths, NUL and control characters, absolute paths, drive letters, `..`, text that is
    not UTF-8 (lone surrogates, as `surrogateescape` decoding leaves them), a segment over
    MAX_SEGMENT_BYTES or a path over MAX_PATH_BYTES (bytes on the disk), and (for writes) a trailing
    slash: `name/` names a directory, never the file `name`.

    `escapes` (default: not for writes): the shown form's escapes (`\\xHH`, `\\\\`: docs/architecture.md
    "Workspace names") name the file a command made with bytes that are not UTF-8, a control character or
    a backslash, so a listed name can be read and deleted; a new file is never given such a name, and
    any other backslash is refused.
    """
    if escapes is None:
        escapes = not for_write
    rel = _checked_text(rel, escapes=escapes)
    if for_write and rel.endswith("/"):
        raise PathRefused("a file path must not end with '/'")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        raise PathRefused("path names the workspace itself")
    if any(p == ".." for p in parts):
        raise PathRefused("'..' is not allowed in paths")
    try:
        parts = [unshow(p) for p in parts]
    except BadEscape as exc:
        raise PathRefused(f"{exc} (a backslash in a path)") from exc
    size = sum(len(os.fsencode(p)) for p in parts) + len(parts) - 1
    if size > MAX_PATH_BYTES:
        raise PathRefused(f"path too long: {size} bytes; the limit is {MAX_PATH_BYTES} bytes")
    for part in parts:
        n = len(os.fsencode(part))
        if n > MAX_SEGMENT_BYTES:
            raise PathRefused(f"path segment too long: {show(part)[:32]!r}... is {n} bytes; the limit is {MAX_SEGMENT_BYTES}")
    return parts


def shown_path(parts: list[str]) -> str:
    """The text of a path split by `split_workspace_path` (shared/pathnames.py `show`): what a response,
    an event or a record names it by."""
    return show("/".join(parts))


def resolve_workspace_path(workspace: Path, rel: str) -> Path:
    """Resolve a path strictly inside the workspace, for display and checks only.

    Resolving then opening is a race a sandboxed command can win (swap a directory for a symlink in
    between): open and write workspace files through shared.workspace_fs instead.
    """
    parts = split_workspace_path(rel)
    base = workspace.resolve()
    candidate = base.joinpath(*parts)
    try:
        resolved = candidate.resolve()
    except (RuntimeError, OSError) as exc:  # 3.11 raises RuntimeError on a loop, 3.13 OSError(ELOOP)
        raise PathRefused("path is a symlink loop or cannot be resolved") from exc
    if resolved != base and base not in resolved.parents:
        raise PathRefused("path leaves the workspace")
    return resolved


def check_size(data: bytes, limit: int, what: str = "file") -> None:
    if len(data) > limit:
        raise TooLarge(f"{what} is {len(data)} bytes; the limit is {limit} bytes")


def workspace_files(workspace: Path, limit: int = 5000, *, max_depth: int = 64, budget_s: float = 2.0) -> list[str]:
    """Relative paths of the regular files in the workspace (the viewable-files projection): at most
    `limit` of them, from a bounded walk (shared/walk.py) that never raises, so however a command
    shaped the workspace a wake gets a (possibly partial) list."""
    found = walk(workspace, WalkLimits(max_entries=4 * limit, max_depth=max_depth, budget_s=budget_s))
    return sorted(e.rel for e in found.entries if e.kind == "file")[:limit]
