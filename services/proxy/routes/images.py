"""`GET /sessions/{sid}/images/{sha256}`: one image of the conversation by content hash, for the
session's owner (the inspector's thumbnails; docs/architecture.md "Images").

The hash is validated as 64 lowercase hex digits before any path is built, so it cannot name anything
but a file in the session's `.images/`. The Content-Type comes from the stored bytes' magic, never
from the request, and `nosniff` stops a browser from guessing otherwise.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import APIRouter, Depends
from fastapi import Path as PathParam
from fastapi.responses import Response

from services.proxy.deps import Proxy, get_proxy
from services.proxy.edge.errors import ApiError
from services.proxy.liveness import owned_session
from services.proxy.rows import SessionState
from shared.media.images import image_file, sniff
from shared.storage.disk import session_paths, storage_fault

router = APIRouter(prefix="/sessions", tags=["images"])
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown token"},
    404: {"description": "no such session for this caller, or no such image"},
    422: {"description": "the hash is not 64 lowercase hex digits"},
}


def _read(path: os.PathLike[str]) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if storage_fault(exc) is not None:
            raise  # a failing disk is a 503 (services/proxy/edge/errors.py), not "no such image"
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


@router.get("/{sid}/images/{sha256}", responses={
    **ERRORS, 200: {"description": "the image bytes", "content": {"image/png": {}, "image/jpeg": {}}},
})
async def get_image(sha256: str = PathParam(pattern="^[0-9a-f]{64}$"), state: SessionState = Depends(owned_session),
                    proxy: Proxy = Depends(get_proxy)) -> Response:
    root = session_paths(proxy.settings.storage.data_dir, state.row.id).root
    data = await asyncio.to_thread(_read, image_file(root, sha256))
    mime = sniff(data[:12]) if data else None
    if data is None or mime is None:
        raise ApiError(404, "no such image")
    return Response(data, media_type=mime, headers={"X-Content-Type-Options": "nosniff",
                                                    "Cache-Control": "private, max-age=86400, immutable"})
