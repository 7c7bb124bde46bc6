"""A session's lifecycle: DELETE (erase everything), PATCH (the title, the model), GET /export (a .tar.gz).

docs/architecture.md "Session lifecycle" says what a delete erases and when.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response, StreamingResponse

from services.proxy.deps import Proxy, get_proxy
from services.proxy.dormant.erase import begin, delete_session
from services.proxy.dormant.export import ExportTooLarge, build, chunks
from services.proxy.edge import heavy
from services.proxy.edge.errors import ApiError
from services.proxy.liveness import apply_if_dormant, owned_or_deleting, owned_session
from services.proxy.rows import SessionState, load_state, set_model, set_title
from shared.catalogue.sessions import ModelRefused, changed, settle
from shared.contracts.http import ModelConfig, PatchSession, SessionView
from shared.contracts.streams.inbox import ModelChange
from shared.history.model_change import record_on_disk
from shared.storage.disk import session_paths

router = APIRouter(prefix="/sessions", tags=["sessions"])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "missing or unknown token"},
                                           404: {"description": "no such session for this user"}}


@router.delete("/{sid}", status_code=204, responses={
    **ERRORS,
    202: {"description": "the runtime did not release the session in time; the erase finishes in the background"},
    404: {"description": "no such session for this user, or already deleted (a repeated DELETE is 404)"}})
async def delete_session_route(state: SessionState = Depends(owned_or_deleting),
                               proxy: Proxy = Depends(get_proxy)) -> Response:
    """Abort a live run, release the lease, erase the session's disk and every Redis key of it; the
    session leaves GET /sessions and the owner's session quota at once. A DELETE of a session whose
    delete was interrupted resumes it. Later writes and notifications for the id are refused."""
    sid = state.row.id
    await begin(proxy.redis, sid, state.row.owner)
    erased = await delete_session(proxy, sid)
    proxy.fanout.close_session(sid, "deleted")  # its event streams here end now (others at a heartbeat)
    if not erased:
        return JSONResponse({"status": "deleting"}, status_code=202)
    return Response(status_code=204)


@router.patch("/{sid}", response_model=SessionView, responses={
    **ERRORS, 409: {"description": "the session is waking; retry"},
    422: {"description": "a title that is empty, too long, or holds control characters; a model, effort or API "
                         "the model rejects (`detail` names the field and the allowed values)"},
    504: {"description": "the session runtime did not answer"}})
async def patch_session(body: PatchSession, state: SessionState = Depends(owned_session),
                        proxy: Proxy = Depends(get_proxy)) -> SessionView:
    """The title, and/or the session's model: checked like POST /sessions, recorded in the transcript
    (a `model_change` entry), used from the next model call on, live or dormant."""
    model = None
    if body.model is not None:
        current, models = state.row.model, proxy.settings.models
        try:
            model = settle(changed(current, body.model, body.model.model_fields_set), models.catalogue, models.model,
                           current.api or models.default_model_api)
        except ModelRefused as exc:
            raise ApiError(422, str(exc), exc.problem.detail()) from exc
    if "title" in body.model_fields_set:
        await set_title(proxy.redis, state.row.id, body.title)
    if model is not None and model != state.row.model:
        await change_model(proxy, state, model)
    fresh = await load_state(proxy.redis, state.row.id)
    if fresh is None or fresh.row.status == "deleting":
        raise ApiError(404, f"session {state.row.id!r} not found")
    return fresh.view()


async def change_model(proxy: Proxy, state: SessionState, model: ModelConfig) -> None:
    """The row first (a wake from here on reads the new model), then the transcript's record: by the
    proxy on a dormant session's disk, else by the lease holder, which also switches its live settings."""
    sid = state.row.id
    if not await set_model(proxy.redis, sid, model):
        raise ApiError(404, f"session {sid!r} not found")
    paths = session_paths(proxy.settings.storage.data_dir, sid)

    async def dormant() -> str | None:
        return await asyncio.to_thread(record_on_disk, paths, model)

    if await apply_if_dormant(proxy, state, "model", dormant) is None:
        await proxy.forward(ModelChange(session_id=sid, name=model.name or proxy.settings.models.model,
                                        reasoning_effort=model.reasoning_effort, api=model.api or "responses",
                                        context_window=model.context_window))


@router.get("/{sid}/export", response_class=StreamingResponse, responses={
    **ERRORS, 200: {"content": {"application/gzip": {}}, "description": "a .tar.gz of the session under `{id}/`"},
    413: {"description": "the session's files exceed GAMMA_EXPORT_MAX_BYTES"},
    429: {"description": "too many exports in flight, the user's or the server's (Retry-After)"}})
async def export(state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)) -> StreamingResponse:
    """The transcript as stored (all branches), todo, UI state, documents and workspace files, with
    `session.json` (the session as GET /sessions/{id} shows it). Symlinks and special files in the
    workspace are left out. `Content-Length` is set (the archive is built before it is sent)."""
    sid = state.row.id
    paths = session_paths(proxy.settings.storage.data_dir, sid)
    meta = state.view().model_dump_json(indent=2).encode()
    lim = proxy.settings.limits
    slot = heavy.gate("exports", lim.exports_per_user, lim.exports_per_process,
                      "GAMMA_EXPORTS_PER_USER, GAMMA_EXPORTS_PER_PROCESS").take(state.row.owner)
    try:
        f = await asyncio.to_thread(build, paths.root, sid, meta, proxy.settings.sessions.export_max_bytes,
                                    proxy.settings.storage.data_dir / ".exports")
    except ExportTooLarge as exc:
        slot.release()
        raise ApiError(413, str(exc)) from exc
    except FileNotFoundError as exc:
        slot.release()
        raise ApiError(404, f"session {sid!r} has no data on disk") from exc
    except BaseException:
        slot.release()
        raise
    size = os.fstat(f.fileno()).st_size
    headers = {"Content-Length": str(size), "Content-Disposition": f'attachment; filename="{sid}.tar.gz"',
               "Cache-Control": "no-store"}
    # the slot is held until the archive is sent: its temporary file is disk taken meanwhile
    return StreamingResponse(heavy.released_after(chunks(f), slot), media_type="application/gzip", headers=headers)
