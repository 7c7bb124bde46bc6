"""Session files `GET|PUT|DELETE /sessions/{sid}/workspace/files/{path}` (docs/integration.md
"Forwarded live writes").

Reads come from the session disk in both states (the runtime writes its files there at once).
Writes go through `shared.ui.write_model` on both sides: live -> `FileWrite` / `FileDelete` to the
runtime, which owns live files and answers; dormant (also never woken) -> the proxy writes a new or
existing file, or removes one, under the dormant-write lock, within the session's workspace quota
(507), and the session stays dormant. Either way the change goes to the digest, which tells the agent
(a dormant change through `pending_artifacts.json`, before the woken prompt).

Paths: the raw request path is decoded here (invalid UTF-8 is a 400, never U+FFFD), validated and
NFC-normalised by `shared.storage.disk.split_workspace_path` before any I/O, and every open goes beneath the
workspace through `shared.storage.workspace_fs` (a link a sandboxed command planted cannot lead out of it).
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote, unquote_to_bytes

import structlog
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from services.proxy.artifacts import BlobRef, client_digest, file_changed, file_deleted, file_ref
from services.proxy.deps import Proxy, get_proxy, tracking
from services.proxy.dormant import disk_budget
from services.proxy.edge.errors import DISK_ERRORS
from services.proxy.liveness import apply_if_dormant, owned_session
from services.proxy.rows import SessionState
from shared.contracts.base import new_id
from shared.contracts.http import FileWritten
from shared.contracts.streams.inbox import FileDelete, FileWrite
from shared.redis import revnum
from shared.storage import workspace_fs
from shared.storage.blobs import remove_blob, write_blob
from shared.storage.disk import PathRefused, check_size, session_paths, shown_path, split_workspace_path
from shared.storage.quota import WorkspaceQuota
from shared.ui import write_model
from shared.ui.write_model import Refused

log = structlog.get_logger()

router = APIRouter(prefix="/sessions", tags=["workspace"])
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "a path outside the workspace, not UTF-8, too long, or a bad header"},
    401: {"description": "missing or unknown token"},
    404: {"description": "no such session, or no such file"},
    409: {"description": "the path is a directory, goes through a file, or is not a regular file"},
    **DISK_ERRORS,
}
STREAM_ABOVE = 1024 * 1024  # files up to this size are answered from memory, larger ones streamed
MARKER = b"/workspace/files/"
BINARY_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def request_path(request: Request, path: str) -> str:
    """The file path as the client sent it: Starlette percent-decodes with errors="replace", so two
    different invalid byte sequences would both become U+FFFD and name one file. Decode the raw
    bytes strictly instead."""
    raw = request.scope.get("raw_path")
    if not isinstance(raw, bytes):
        return path
    raw = raw.split(b"?", 1)[0]
    at = raw.find(MARKER)
    if at < 0:
        return path
    try:
        return unquote_to_bytes(raw[at + len(MARKER):]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PathRefused("path is not valid UTF-8") from exc


class WriteTarget(NamedTuple):
    sid: str
    workspace: Path
    rel: str  # the validated, normalised workspace path
    digest: str | None  # X-Gamma-Digest


def write_target(request: Request, path: str, digest_header: str | None, state: SessionState,
                 proxy: Proxy, *, delete: bool = False) -> WriteTarget:
    """What a PUT or DELETE acts on. A name that can never be written is refused here, before the body
    is read or the disk touched; a DELETE may name a file by its escaped (shown) name, a PUT never
    creates one (docs/architecture.md "Workspace names")."""
    sid = state.row.id
    rel = shown_path(split_workspace_path(request_path(request, path), for_write=True, escapes=delete))
    return WriteTarget(sid, session_paths(proxy.settings.storage.data_dir, sid).workspace, rel, client_digest(digest_header))


# A workspace file is whatever a command or the model wrote (docs/architecture.md "Limits on hostile
# input"): served by its extension, an `.html` or `.svg` would run script in the proxy's origin. Only
# types that carry no script are named, and only raster images are shown inline; everything else is an
# attachment of bytes.
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PASSIVE_TYPES = INLINE_TYPES | {"text/plain", "text/markdown", "text/csv", "application/json", "application/pdf"}


def file_headers(rel: str) -> tuple[str, dict[str, str]]:
    """The media type and headers a workspace file is served with (never typed as active content)."""
    guessed = mimetypes.guess_type(rel)[0] or ""
    media = guessed if guessed in PASSIVE_TYPES else "application/octet-stream"
    name = quote(rel.rsplit("/", 1)[-1], safe="")
    disposition = "inline" if media in INLINE_TYPES else "attachment"
    return media, {"X-Content-Type-Options": "nosniff", "Content-Disposition": f"{disposition}; filename*=UTF-8''{name}",
                   "Content-Security-Policy": "default-src 'none'; sandbox"}


async def _file_body(opened: workspace_fs.Opened) -> Response:
    """The bytes of the file as it was opened: a rename that replaces it later (an atomic write) does
    not change what this response sends, and an append is not sent past the size announced."""
    media, headers = file_headers(opened.rel)
    size = opened.st.st_size
    fh = os.fdopen(opened.fd, "rb")
    if size <= STREAM_ABOVE:
        with fh:
            return Response(await asyncio.to_thread(fh.read, size), media_type=media, headers=headers)

    async def chunks() -> AsyncIterator[bytes]:
        left = size
        try:
            while left > 0:
                chunk = await asyncio.to_thread(fh.read, min(left, 256 * 1024))
                if not chunk:
                    break
                left -= len(chunk)
                yield chunk
        finally:
            fh.close()

    return StreamingResponse(chunks(), media_type=media, headers={**headers, "Content-Length": str(size)})


@router.get("/{sid}/workspace/files/{path:path}", responses={
    **ERRORS, 200: {"description": "the file's bytes, or a JSON listing for a directory",
                    "content": {"application/octet-stream": {}, "application/json": {}}},
})
async def read_file(request: Request, path: str, state: SessionState = Depends(owned_session),
                    proxy: Proxy = Depends(get_proxy)) -> Response:
    workspace = session_paths(proxy.settings.storage.data_dir, state.row.id).workspace
    path = request_path(request, path)
    most = proxy.settings.storage.workspace_max_entries
    if path.strip("/") == "":  # the workspace root itself: a listing
        return JSONResponse({"path": "", "entries": await asyncio.to_thread(_root_listing, workspace, most)})
    opened = await asyncio.to_thread(workspace_fs.open_entry, workspace, path)
    if opened.is_dir:
        try:
            entries = await asyncio.to_thread(workspace_fs.list_dir, opened.fd, most)
            return JSONResponse({"path": opened.rel + "/", "entries": entries})
        finally:
            os.close(opened.fd)
    # Read from the fd opened beneath the workspace (an agent-made file may be larger than the write
    # cap); atomic renames mean a concurrent runtime write is seen whole or not at all.
    return await _file_body(opened)


def _root_listing(workspace: Path, most: int) -> list[dict[str, object]]:
    workspace.mkdir(parents=True, exist_ok=True)
    with workspace_fs.workspace_root(workspace) as root:
        return workspace_fs.list_dir(root, most)


@router.put("/{sid}/workspace/files/{path:path}", response_model=FileWritten, openapi_extra=BINARY_BODY, responses={
    **ERRORS, 200: {"description": "{path, size, revision, created}: `created` when there was no file before"},
    409: {"description": "the session is waking, or the path is a directory or goes through a file"},
    413: {"description": "file too large"}, 504: {"description": "runtime timeout"},
    507: {"description": "the session disk, the session's workspace quota (bytes or files) or the user's disk "
                        "budget (GAMMA_USER_DISK_BYTES) is full"},
})
async def write_file(
    path: str, request: Request, x_gamma_digest: str | None = Header(None),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> JSONResponse:
    entered = time.time()
    sid, workspace, rel, digest = write_target(request, path, x_gamma_digest, state, proxy)
    data = await request.body()
    check_size(data, proxy.settings.storage.max_file_bytes)
    await disk_budget.admit(proxy, state.row.owner, len(data), "this upload")
    data_dir = proxy.settings.storage.data_dir
    workspace_quota = WorkspaceQuota.from_settings(proxy.settings)

    async def dormant() -> tuple[write_model.FileWritten, int] | Refused:
        # Numbered and published under the dormant-write lock: two writes to one file are numbered and
        # reach the digest in the order they hit the disk (shared/redis/revnum.py).
        written = await asyncio.to_thread(write_model.write_file, workspace, rel, data,
                                          max_bytes=proxy.settings.storage.max_file_bytes, quota=workspace_quota)
        if isinstance(written, Refused):
            return written
        revision = await revnum.next_revision(proxy.redis, sid, file_ref(written.path))
        blob = await _stage(data_dir, sid, new_id("b_"), data)
        await file_changed(proxy.broker, sid, written.path, blob, digest, revision, created=written.created,
                           track=tracking(proxy))
        return written, revision

    applied = await apply_if_dormant(proxy, state, "file", dormant)
    if applied is not None:
        written, number = applied.value
        return JSONResponse({"path": written.path, "size": written.size, "revision": number,
                             "created": written.created})
    # Live: the bytes go to a content blob on the session disk, the inbox entry only names it; the
    # runtime copies it into the workspace, and the ArtifactChange names the same blob for the digest.
    staging = time.time()
    blob = await _stage(data_dir, sid, new_id("b_"), data)
    staged = time.time()
    message = FileWrite(session_id=sid, path=rel, blob=blob.name, sha256=blob.sha256, size=blob.size, digest=digest)
    try:
        reply = await proxy.forward(message)
    except BaseException:
        # Refused or timed out: nothing will name the blob (a runtime reading it later answers 410).
        await asyncio.to_thread(remove_blob, data_dir, sid, blob.name)
        raise
    revision = reply.body.get("revision")
    replied = time.time()
    await file_changed(proxy.broker, sid, rel, blob, digest, revision if isinstance(revision, int) else None,
                       created=reply.body.get("created") is True, track=tracking(proxy))
    if proxy.settings.server.trace_inbox:  # bench/e2e.py --trace: where a live PUT's time goes
        log.info("file_put_timing", session_id=sid, entered=round(entered, 4),
                 arrived=round(request.scope.get("gamma.arrived", entered), 4), body_ms=round((staging - entered) * 1000, 1),
                 stage_ms=round((staged - staging) * 1000, 1),
                 forward_ms=round((replied - staged) * 1000, 1), publish_ms=round((time.time() - replied) * 1000, 1))
    return JSONResponse(reply.body, status_code=reply.status)


@router.delete("/{sid}/workspace/files/{path:path}", responses={
    **ERRORS, 200: {"description": "{path, deleted: true, revision}; with `recursive`, a directory's "
                    "`files: [{path, revision}]` (the regular files removed with it)"},
    409: {"description": "the session is waking, the path is a directory (without `recursive`) or goes "
                         "through a file, or the tree is past the workspace's bounds"},
    504: {"description": "runtime timeout"},
})
async def delete_file(
    path: str, request: Request, x_gamma_digest: str | None = Header(None),
    recursive: bool = Query(False, description="remove a directory with everything under it"),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> JSONResponse:
    """Remove one file, or (`recursive`) a directory tree within the workspace's bounds
    (GAMMA_WORKSPACE_MAX_ENTRIES, GAMMA_WORKSPACE_MAX_DEPTH). The agent is told in its next
    `artifact_update`, one deleted file each."""
    sid, workspace, rel, digest = write_target(request, path, x_gamma_digest, state, proxy, delete=True)
    tree = WorkspaceQuota.from_settings(proxy.settings).limits if recursive else None

    async def dormant() -> dict[str, Any] | Refused:
        removed = await asyncio.to_thread(write_model.remove_file, workspace, rel, tree=tree)
        if isinstance(removed, Refused):
            return removed
        if removed.files is None:
            revision = await revnum.next_revision(proxy.redis, sid, file_ref(removed.path))
            await file_deleted(proxy.broker, sid, removed.path, digest, revision, track=tracking(proxy))
            return {"path": removed.path, "deleted": True, "revision": revision}
        files = []
        for gone in removed.files:
            number = await revnum.next_revision(proxy.redis, sid, file_ref(gone))
            await file_deleted(proxy.broker, sid, gone, digest, number, track=tracking(proxy))
            files.append({"path": gone, "revision": number})
        return {"path": removed.path, "deleted": True, "revision": None, "files": files}

    applied = await apply_if_dormant(proxy, state, "file_delete", dormant)
    if applied is not None:
        return JSONResponse(applied.value)
    reply = await proxy.forward(FileDelete(session_id=sid, path=rel, recursive=recursive))
    if reply.status == 200:
        for gone, number in _deleted_files(rel, reply.body):
            await file_deleted(proxy.broker, sid, gone, digest, number, track=tracking(proxy))
    return JSONResponse(reply.body, status_code=reply.status)


def _deleted_files(rel: str, body: dict[str, Any]) -> list[tuple[str, int | None]]:
    """The files a live delete removed, from the runtime's answer: one file, or a tree's `files`."""
    files = body.get("files")
    if not isinstance(files, list):
        revision = body.get("revision")
        return [(rel, revision if isinstance(revision, int) else None)]
    out: list[tuple[str, int | None]] = []
    for item in files:
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            number = item.get("revision")
            out.append((item["path"], number if isinstance(number, int) else None))
    return out


async def _stage(data_dir: Path, sid: str, name: str, data: bytes) -> BlobRef:
    sha = await asyncio.to_thread(write_blob, data_dir, sid, name, data)
    return BlobRef(name=name, sha256=sha, size=len(data))
