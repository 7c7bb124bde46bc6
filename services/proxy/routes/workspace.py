"""Session files `GET|PUT /sessions/{sid}/workspace/files/{path}` (seed: "Dormant preview and writes").

Reads come from the session disk in both states (the runtime writes its files there at once).
Writes: live -> `FileWrite` to the runtime, which writes and answers; dormant -> the proxy
overwrites an existing file under the dormant-write lock (a new file while dormant is a 404: the seed's
dormant path overwrites existing files only). Paths resolve only through `shared.disk`.
"""

from __future__ import annotations

import asyncio
import mimetypes
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from shared.blobs import remove_blob, write_blob
from shared.contracts.base import new_id
from shared.contracts.inbox import FileWrite
from shared.disk import atomic_write_bytes, check_size, resolve_workspace_path, session_paths

from ..artifacts import BlobRef, client_digest, file_changed
from ..deps import Proxy, get_proxy
from ..errors import ApiError
from ..liveness import BecameLive, dormant_lock, owned_session, write_mode
from ..rows import SessionState

router = APIRouter(prefix="/sessions", tags=["workspace"])
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "a path outside the workspace, or a bad header"},
    401: {"description": "missing or unknown token"},
    404: {"description": "no such session, or no such file"},
}
BINARY_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


def _listing(root: Path, target: Path) -> dict[str, Any]:
    entries = []
    for child in sorted(target.iterdir()):
        if child.is_symlink():
            continue
        entries.append({"name": child.name, "type": "directory" if child.is_dir() else "file",
                        "size": child.stat().st_size if child.is_file() else None})
    rel = target.relative_to(root).as_posix()
    return {"path": "" if rel == "." else rel + "/", "entries": entries}


@router.get("/{sid}/workspace/files/{path:path}", responses={
    **ERRORS, 200: {"description": "the file's bytes, or a JSON listing for a directory",
                    "content": {"application/octet-stream": {}, "application/json": {}}},
})
async def read_file(path: str, state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)) -> Response:
    workspace = session_paths(proxy.settings.data_dir, state.row.id).workspace
    if path.strip("/") == "":  # the workspace root itself: a listing
        workspace.mkdir(parents=True, exist_ok=True)
        return JSONResponse(_listing(workspace.resolve(), workspace.resolve()))
    target = resolve_workspace_path(workspace, path)
    if target.is_dir():
        return JSONResponse(_listing(workspace.resolve(), target))
    if not target.is_file():
        raise ApiError(404, f"no file {path!r} in the session workspace")
    # Streamed from disk (an agent-made file may be larger than the write cap); atomic renames mean a
    # concurrent runtime write is seen whole or not at all.
    media = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    return FileResponse(target, media_type=media)


@router.put("/{sid}/workspace/files/{path:path}", openapi_extra=BINARY_BODY, responses={
    **ERRORS, 200: {"description": "{path, size, revision}"}, 409: {"description": "the session is waking"},
    413: {"description": "file too large"}, 504: {"description": "runtime timeout"},
})
async def write_file(
    path: str, request: Request, x_gamma_digest: str | None = Header(None),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> JSONResponse:
    sid = state.row.id
    workspace = session_paths(proxy.settings.data_dir, sid).workspace
    target = resolve_workspace_path(workspace, path)  # refuse bad paths before reading the body
    rel = target.relative_to(workspace.resolve()).as_posix()
    digest = client_digest(x_gamma_digest)
    data = await request.body()
    check_size(data, proxy.settings.max_file_bytes)
    data_dir = proxy.settings.data_dir
    if await write_mode(proxy, state) == "dormant":
        try:
            async with dormant_lock(proxy.redis, sid):
                if not target.is_file():
                    raise ApiError(404, f"no file {rel!r}: a dormant session overwrites existing files only")
                await asyncio.to_thread(atomic_write_bytes, target, data)
            proxy.metrics.dormant_writes.labels("file").inc()
            blob = await _stage(data_dir, sid, new_id("b_"), data)
            await file_changed(proxy.broker, sid, rel, blob, digest)
            return JSONResponse({"path": rel, "size": len(data), "revision": None})
        except BecameLive:
            pass
    # Live: the bytes go to a content blob on the session disk, the inbox entry only names it; the
    # runtime copies it into the workspace, and the ArtifactChange names the same blob for the digest.
    blob = await _stage(data_dir, sid, new_id("b_"), data)
    message = FileWrite(session_id=sid, path=rel, blob=blob.name, sha256=blob.sha256, size=blob.size, digest=digest)
    try:
        reply = await proxy.forward(message)
    except BaseException:
        # Refused or timed out: nothing will name the blob (a runtime reading it later answers 410).
        await asyncio.to_thread(remove_blob, data_dir, sid, blob.name)
        raise
    revision = reply.body.get("revision")
    await file_changed(proxy.broker, sid, rel, blob, digest, revision if isinstance(revision, int) else None)
    return JSONResponse(reply.body, status_code=reply.status)


async def _stage(data_dir: Path, sid: str, name: str, data: bytes) -> BlobRef:
    sha = await asyncio.to_thread(write_blob, data_dir, sid, name, data)
    return BlobRef(name=name, sha256=sha, size=len(data))
