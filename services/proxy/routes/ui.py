"""SessionUIState: `GET /ui` and `POST /ui/sync` (docs/integration.md "Forwarded live writes").

Live: the runtime owns the Yjs document; the proxy forwards a `UiUpdate` and answers with the
runtime's `{snapshot, update}` (a read is an empty update). Dormant: the proxy validates and writes
the complete snapshot to `state.json`; without a snapshot it applies the update to the document
rebuilt from `state.json` and stores the result. Both go through the rule the runtime applies live
(shared.ui.uirules, shared.ui.uimerge): every check runs before any write, and a 400, 413 or 422 leaves
state.json as it was.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends

from services.proxy.deps import Proxy, get_proxy
from services.proxy.dormant.preview import read_ui
from services.proxy.dormant.uidoc import api_error, decode_b64, encode_b64, validate_snapshot
from services.proxy.edge.errors import DISK_ERRORS
from services.proxy.liveness import apply_if_dormant, owned_session
from services.proxy.rows import SessionState
from shared.contracts.http import UiState, UiSync
from shared.contracts.streams.inbox import UiUpdate
from shared.storage.disk import session_paths
from shared.ui import write_model
from shared.ui.uidoc import EMPTY_UPDATE, doc_from_snapshot
from shared.ui.uimerge import check_update
from shared.ui.uirules import UiLimits, UiRefused

router = APIRouter(prefix="/sessions", tags=["ui"])
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown token"},
    404: {"description": "no such session for this user"},
    **DISK_ERRORS,
}


def _state(snapshot: dict[str, Any]) -> UiState:
    return UiState(snapshot=snapshot, update=encode_b64(doc_from_snapshot(snapshot).get_update()))


async def _live(proxy: Proxy, sid: str, update: str, snapshot: dict[str, Any] | None) -> UiState:
    reply = await proxy.forward(UiUpdate(session_id=sid, update=update, snapshot=snapshot))
    return UiState.model_validate(reply.body)


@router.get("/{sid}/ui", response_model=UiState, responses={**ERRORS, 504: {"description": "runtime timeout"}})
async def get_ui(state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)) -> UiState:
    sid = state.row.id
    if state.status() == "live":
        return await _live(proxy, sid, encode_b64(EMPTY_UPDATE), None)
    return _state(await asyncio.to_thread(read_ui, session_paths(proxy.settings.storage.data_dir, sid)))


@router.post("/{sid}/ui/sync", response_model=UiState, responses={
    **ERRORS, 400: {"description": "malformed base64 or Yjs update"},
    403: {"description": "a change to the agent's form other than answering or dismissing it (shared/ui/form_rules.py)"},
    409: {"description": "the session is waking"},
    413: {"description": "the update or the merged document is over its byte cap"},
    422: {"description": "the merged state is not a valid SessionUIState, holds too many values, or answers the "
                         "agent's form outside its fields"},
    504: {"description": "runtime timeout"},
})
async def sync_ui(body: UiSync, state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)) -> UiState:
    sid = state.row.id
    limits = UiLimits.of(proxy.settings)
    update = decode_b64(body.update)
    try:
        await check_update(update, limits)
    except UiRefused as exc:
        raise api_error(exc) from exc
    snapshot = validate_snapshot(body.snapshot, limits) if body.snapshot is not None else None
    paths = session_paths(proxy.settings.storage.data_dir, sid)
    async def dormant() -> dict[str, Any] | write_model.Refused:
        # The read in the I/O pool: on a network disk it is milliseconds the loop must not wait.
        return await write_model.sync_stored_ui(paths, await asyncio.to_thread(read_ui, paths), update, snapshot, limits)

    applied = await apply_if_dormant(proxy, state, "ui", dormant)
    if applied is None:
        return await _live(proxy, sid, body.update, snapshot)
    return _state(applied.value)
