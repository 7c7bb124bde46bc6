"""Rewind and fork (docs/architecture.md "Snapshots, rewind and fork").

`POST /sessions/{sid}/rewind`: live -> a `Rewind` to the lease holder, which aborts the active run,
restores and answers; dormant -> the proxy rewinds the disk itself under the dormant-write lock
(shared/history/rewind.py), and the session stays dormant. `POST /sessions/{sid}/fork` reads the source's
disk (never writes it, except a dormant source's own snapshot of its leaf under its lock) and lays out
a new dormant session of the same owner, within the user's session quota and creation rate.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Body, Depends

from services.proxy.auth import current_user
from services.proxy.budgets import caps_of
from services.proxy.deps import Proxy, get_proxy
from services.proxy.dormant import disk_budget
from services.proxy.edge import heavy
from services.proxy.edge.errors import ApiError
from services.proxy.edge.quotas import check_create_rate
from services.proxy.idempotency import IDEMPOTENCY_RESPONSES, IDEMPOTENT
from services.proxy.liveness import BecameLive, apply_if_dormant, dormant_lock, owned_session, write_mode
from services.proxy.rows import SessionQuotaExceeded, SessionState, create_row, drop_row, load_state
from shared.contracts.http import ForkBody, ForkedSession, ForkOrigin, ModelUsage, RewindBody, RewindResult
from shared.contracts.records.messages import UserMessage
from shared.contracts.records.transcript import MessageEntry
from shared.contracts.streams.inbox import Rewind
from shared.history import fork as forking
from shared.history import rewind as rw
from shared.history.transcript_branch import read_branch_apart
from shared.storage.disk import SessionPaths, session_paths
from shared.storage.snapshots import SnapshotLimits
from shared.ui.uirules import default_snapshot
from shared.ui.write_model import Refused

router = APIRouter(prefix="/sessions", tags=["branches"])
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown token"},
    404: {"description": "no such session for this user, or no such entry in its transcript"},
    409: {"description": "no workspace snapshot is kept for that entry (the body names the oldest point "
                         "kept), or the session is waking"},
    504: {"description": "the session runtime did not answer"},
}


async def rewind_session(proxy: Proxy, state: SessionState, entry_id: str,
                         reason: rw.RewindReason = "rewind", edited_id: str | None = None) -> RewindResult:
    """Live or dormant, as the session is; ApiError for a refusal (also used by `edit_of`)."""
    paths = session_paths(proxy.settings.storage.data_dir, state.row.id)
    limits = SnapshotLimits.of(proxy.settings)

    async def dormant() -> dict[str, Any] | Refused:
        try:
            return await asyncio.to_thread(rw.rewind_on_disk, paths, limits, entry_id, reason, rw.now_iso(),
                                           edited_id)
        except rw.RewindRefused as exc:
            return Refused(exc.status, exc.message, exc.detail)

    applied = await apply_if_dormant(proxy, state, "rewind", dormant)
    if applied is not None:
        return RewindResult.model_validate(applied.value)
    reply = await proxy.forward(Rewind(session_id=state.row.id, entry_id=entry_id, reason=reason, edited_id=edited_id))
    return RewindResult.model_validate(reply.body)


def _edit_target(paths: SessionPaths, entry_id: str) -> str | None:
    """The parent of user message `entry_id` (None when it is not one)."""
    branch = read_branch_apart(paths.transcript, entry_id)  # by offset, a long file in a child (transcript_branch.py)
    last = branch.tail[-1] if branch and branch.tail else None
    if branch is None or not (isinstance(last, MessageEntry) and isinstance(last.message, UserMessage)):
        return None
    return branch.nodes[-2][0] if len(branch.nodes) > 1 else None


async def edit_rewind(proxy: Proxy, state: SessionState, entry_id: str) -> SessionState:
    """`edit_of`: rewind to the edited user message's parent (reason "edit"); the caller then sends the
    new text there, which starts a new branch. Returns the session's state after the rewind."""
    paths = session_paths(proxy.settings.storage.data_dir, state.row.id)
    parent = await asyncio.to_thread(_edit_target, paths, entry_id)
    if parent is None:
        raise ApiError(422, f"edit_of: {entry_id!r} is not a user message of this session")
    await rewind_session(proxy, state, parent, "edit", entry_id)
    return await load_state(proxy.redis, state.row.id) or state


@router.post("/{sid}/rewind", response_model=RewindResult, dependencies=[IDEMPOTENT],
             responses={**ERRORS, **IDEMPOTENCY_RESPONSES})
async def rewind(body: RewindBody, state: SessionState = Depends(owned_session),
                 proxy: Proxy = Depends(get_proxy)) -> RewindResult:
    """Move the active branch to `entry_id` and restore the workspace, documents and todo of that point
    (bash's changes included); a running run is aborted first. Nothing is deleted: the abandoned
    entries stay in the tree (`GET /transcript?tree=1`); rewinding to `from_id` switches back."""
    return await rewind_session(proxy, state, body.entry_id)


@router.post("/{sid}/fork", status_code=201, response_model=ForkedSession, dependencies=[IDEMPOTENT], responses={
    **ERRORS, **IDEMPOTENCY_RESPONSES, 403: {"description": "the user's session quota is reached"},
    507: {"description": "the fork would take the user's sessions past their disk budget (GAMMA_USER_DISK_BYTES)"},
    429: {"description": "too many sessions created in the last minute, or too many forks in flight (Retry-After)"},
})
async def fork(body: ForkBody | None = Body(None), state: SessionState = Depends(owned_session),
               user: str = Depends(current_user), proxy: Proxy = Depends(get_proxy)) -> ForkedSession:
    """A new dormant session (same owner, new id) whose transcript is the branch up to `entry_id`
    (default: the active leaf) and whose workspace, documents, todo and UI state are that entry's.
    The source is not changed. Of a live source, the leaf's state is its latest snapshot."""
    entry_id = body.entry_id if body else None
    lim = proxy.settings.limits
    forks = heavy.gate("forks", lim.forks_per_user, lim.forks_per_process, "GAMMA_FORKS_PER_USER, GAMMA_FORKS_PER_PROCESS")
    with heavy.held(forks, user):  # before anything is counted or read: a 429 here changes nothing
        return await _fork(proxy, state, user, entry_id)


async def _fork(proxy: Proxy, state: SessionState, user: str, entry_id: str | None) -> ForkedSession:
    await disk_budget.admit(proxy, user, await disk_budget.workspace_disk(proxy, state.row.id), "this fork")
    await check_create_rate(proxy.redis, user, proxy.settings.limits.session_creates_per_minute)
    plan = await _plan(proxy, state, entry_id)
    try:
        row = await create_row(proxy.redis, user, state.row.variant, state.row.model,
                               max_sessions=proxy.settings.limits.max_sessions_per_user,
                               budget=await caps_of(proxy.redis, state.row.id))  # the source's caps (docs/costs.md)
    except SessionQuotaExceeded as exc:
        raise ApiError(403, str(exc)) from exc
    dst = session_paths(proxy.settings.storage.data_dir, row.id)
    try:
        async with dormant_lock(proxy.redis, row.id):
            await asyncio.to_thread(forking.lay_out, plan, dst, SnapshotLimits.of(proxy.settings), default_snapshot())
    except BaseException as exc:
        await drop_row(proxy.redis, user, row.id)
        if isinstance(exc, rw.RewindRefused):
            await _source_still_there(proxy, state)
            raise ApiError(exc.status, exc.message, exc.detail) from exc
        raise
    created = await load_state(proxy.redis, row.id)
    assert created is not None
    view = created.view().model_copy(update={"model_usage": ModelUsage.of({})})
    return ForkedSession(**view.model_dump(), forked_from=ForkOrigin(session_id=state.row.id, entry_id=plan.entry_id))


async def _source_still_there(proxy: Proxy, state: SessionState) -> None:
    """A fork that failed because a DELETE of its source raced it is a 404, as the fork after it would be."""
    now = await load_state(proxy.redis, state.row.id)
    if now is None or now.row.status == "deleting":
        raise ApiError(404, f"no session {state.row.id!r}: it was deleted while it was forked")


async def _plan(proxy: Proxy, state: SessionState, entry_id: str | None) -> forking.ForkPlan:
    src = session_paths(proxy.settings.storage.data_dir, state.row.id)
    limits = SnapshotLimits.of(proxy.settings)
    try:
        if await write_mode(proxy, state) == "dormant":
            try:
                async with dormant_lock(proxy.redis, state.row.id):
                    return await asyncio.to_thread(forking.plan, src, limits, entry_id, dormant=True)
            except BecameLive:
                pass
        return await asyncio.to_thread(forking.plan, src, limits, entry_id, dormant=False)
    except rw.RewindRefused as exc:
        await _source_still_there(proxy, state)
        raise ApiError(exc.status, exc.message, exc.detail) from exc
