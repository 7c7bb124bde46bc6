"""Session rows, messages and the wake, suspend/compact, transcript and preview."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from fastapi import APIRouter, Body, Depends, Query
from fastapi.responses import JSONResponse, Response

from services.proxy.auth import current_user
from services.proxy.budgets import BUDGET_RESPONSES, checked_budget, session_spend
from services.proxy.deps import Proxy, get_proxy
from services.proxy.dormant.preview import display_entries, read_todo, read_transcript, read_ui
from services.proxy.dormant.transcript_pages import BadCursor as BadTranscriptCursor
from services.proxy.dormant.transcript_pages import view_and_page
from services.proxy.dormant.uidoc import default_snapshot
from services.proxy.edge.errors import ApiError
from services.proxy.edge.quotas import check_create_rate
from services.proxy.idempotency import IDEMPOTENCY_RESPONSES, IDEMPOTENT
from services.proxy.intake import accept_prompt
from services.proxy.liveness import dormant_lock, owned_session
from services.proxy.rows import (
    BadCursor,
    SessionQuotaExceeded,
    SessionState,
    create_row,
    list_page,
    load_state,
    mark_dormant,
)
from shared.catalogue.sessions import ModelRefused, settle
from shared.contracts.http import (
    CompactBody,
    CreateSession,
    MessageAccepted,
    ModelConfig,
    ModelUsage,
    PostMessage,
    Preview,
    SessionList,
    SessionView,
    Transcript,
)
from shared.contracts.streams.inbox import Compact, Stop
from shared.redis import dormancy
from shared.storage.disk import atomic_write_json, session_paths

router = APIRouter(prefix="/sessions", tags=["sessions"])
log = structlog.get_logger()
DEFAULT_PAGE, MAX_PAGE = 200, 500
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "missing or unknown token"}, 404: {"description": "no such session for this user"}}


@router.post("", status_code=201, response_model=SessionView, dependencies=[IDEMPOTENT], responses={
    **IDEMPOTENCY_RESPONSES, 401: ERRORS[401], 403: {"description": "the user's session quota is reached"},
    429: {"description": "too many sessions created in the last minute (Retry-After)"},
    422: {"description": "a model, effort or API the model rejects (`detail` names the field and the allowed "
                         "values), a budget above the operator's ceiling (`detail`: field, max), or an invalid body"},
})
async def create_session(
    body: CreateSession | None = Body(None), user: str = Depends(current_user), proxy: Proxy = Depends(get_proxy)
) -> SessionView:
    body = body or CreateSession()
    try:  # fixed at creation: a session keeps its API when the setting changes (docs/models.md "Sessions")
        models = proxy.settings.models
        model = settle(body.model or ModelConfig(), models.catalogue, models.model, models.default_model_api)
    except ModelRefused as exc:  # before the creation rate counts it: a refused request changes nothing
        raise ApiError(422, str(exc), exc.problem.detail()) from exc
    budget = checked_budget(body.budget, proxy.settings)
    await check_create_rate(proxy.redis, user, proxy.settings.limits.session_creates_per_minute)
    try:
        row = await create_row(proxy.redis, user, body.variant, model,
                               max_sessions=proxy.settings.limits.max_sessions_per_user, budget=budget)
    except SessionQuotaExceeded as exc:
        raise ApiError(403, str(exc)) from exc
    paths = session_paths(proxy.settings.storage.data_dir, row.id)

    def lay_out() -> None:
        # A new session is dormant: its disk starts with an empty workspace and the default UI state.
        paths.workspace.mkdir(parents=True, exist_ok=True)
        paths.documents.mkdir(parents=True, exist_ok=True)
        atomic_write_json(paths.state, default_snapshot())

    async with dormant_lock(proxy.redis, row.id):
        await asyncio.to_thread(lay_out)
    state = await load_state(proxy.redis, row.id)
    assert state is not None
    spent = await session_spend(proxy.redis, row.id, user, proxy.settings)  # as GET shows it: nothing used yet
    return state.view().model_copy(update={"model_usage": ModelUsage.of({}), "spend": spent})


@router.get("", response_model=SessionList, responses={401: ERRORS[401], 400: {"description": "an invalid cursor"}})
async def list_sessions(
    limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description="sessions per page"),
    cursor: str | None = Query(None, max_length=400, description="`next_cursor` of the previous page"),
    user: str = Depends(current_user), proxy: Proxy = Depends(get_proxy),
) -> SessionList:
    try:
        states, next_cursor = await list_page(proxy.redis, user, limit, cursor)
    except BadCursor as exc:
        raise ApiError(400, str(exc)) from exc
    return SessionList(sessions=[s.view() for s in states], next_cursor=next_cursor)


@router.get("/{sid}", response_model=SessionView, responses=ERRORS)
async def get_session(state: SessionState = Depends(owned_session),
                      proxy: Proxy = Depends(get_proxy)) -> SessionView:
    usage = await dormancy.read_usage(proxy.redis, state.row.id)  # the live hash plus what sweeps folded
    spent = await session_spend(proxy.redis, state.row.id, state.row.owner, proxy.settings)
    return state.view().model_copy(update={"model_usage": ModelUsage.of(usage), "spend": spent})


@router.post("/{sid}/messages", status_code=202, response_model=MessageAccepted, dependencies=[IDEMPOTENT],
             responses={**ERRORS, **IDEMPOTENCY_RESPONSES,
                        409: {"description": "on_busy=reject while a run is active, or expected_run_id is not the "
                                             "active run (nothing queued), or no snapshot is kept for the edited "
                                             "message's parent"},
                        422: {"description": "edit_of does not name a user message of this session"},
                        **BUDGET_RESPONSES,
                        429: {"description": "this user's images are decoding already (attachments; Retry-After)"},
                        503: {"description": "every image decoder is busy (attachments; Retry-After)"}})
async def post_message(
    body: PostMessage, state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)
) -> MessageAccepted:
    return await accept_prompt(proxy, state, body)


@router.post("/{sid}/suspend", dependencies=[IDEMPOTENT], responses={**ERRORS, **IDEMPOTENCY_RESPONSES, 409: {"description": "the session is waking"},
                                           504: {"description": "the runtime did not answer"}})
async def suspend(state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)) -> JSONResponse:
    sid = state.row.id
    status = state.status()
    if status == "dormant":
        return JSONResponse({"status": "dormant"})
    if status == "waking":
        raise ApiError(409, "the session is waking; suspend it once it is live")
    reply = await proxy.forward(Stop(session_id=sid))
    await mark_dormant(proxy.redis, sid)
    return JSONResponse(reply.body or {"status": "dormant"}, status_code=reply.status)


@router.post("/{sid}/compact", dependencies=[IDEMPOTENT], responses={**ERRORS, **IDEMPOTENCY_RESPONSES, 409: {"description": "the session is not live"},
                                           504: {"description": "the runtime did not answer"}})
async def compact(
    body: CompactBody | None = Body(None), state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)
) -> JSONResponse:
    if state.status() != "live":
        raise ApiError(409, f"the session is {state.status()}; compaction runs on a live session (send a message first)")
    message = Compact(session_id=state.row.id, instructions=(body.instructions if body else None))
    reply = await proxy.forward(message)
    return JSONResponse(reply.body or {"request_id": message.request_id}, status_code=reply.status)


@router.get("/{sid}/transcript", response_model=Transcript,
            responses={**ERRORS, 400: {"description": "a cursor not returned by this API, or limit above the cap"}})
async def transcript(
    cursor: str = Query("0", pattern=r"^\d{1,19}$", description="next_cursor of the previous page; 0 for the first"),
    limit: int | None = Query(None, ge=1, description="entries per page, at most GAMMA_TRANSCRIPT_PAGE_MAX"),
    tree: bool = Query(False, description="every entry of every branch, with `branch_points` and `leaf_id`"),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> Response:
    """The transcript entries as stored, one page at a time (at most GAMMA_TRANSCRIPT_PAGE_MAX entries and
    GAMMA_TRANSCRIPT_PAGE_BYTES); follow `next_cursor` while `has_more`. By default the active branch
    (root to leaf); `tree=1`: the whole tree, each entry with its `parentId` (a leaf move, type `leaf`,
    has a `targetId` instead)."""
    cap = proxy.settings.limits.transcript_page_max
    if limit is not None and limit > cap:
        raise ApiError(400, f"limit must be at most {cap}")
    paths = session_paths(proxy.settings.storage.data_dir, state.row.id)
    try:
        view, page = await asyncio.to_thread(view_and_page, paths.transcript, int(cursor), limit or cap,
                                             proxy.settings.limits.transcript_page_bytes, tree)
    except BadTranscriptCursor as exc:
        raise ApiError(400, str(exc)) from exc
    body = Transcript(entries=page.entries, next_cursor=page.next_cursor, has_more=page.has_more,
                      leaf_id=view.leaf_id, branch_points=view.branch_points if tree else None)
    return Response(body.model_dump_json(), media_type="application/json")


@router.get("/{sid}/preview", response_model=Preview, responses=ERRORS)
async def preview(state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)) -> Response:
    # The hot path of a dormant client: built and validated once as the contract model, serialized
    # once (returning the model would make FastAPI validate it a second time against response_model).
    paths = session_paths(proxy.settings.storage.data_dir, state.row.id)

    def build() -> str:  # in the I/O pool: three reads of the session disk
        return Preview(status=state.status(), transcript=display_entries(read_transcript(paths)), ui=read_ui(paths),
                       todo=read_todo(paths)).model_dump_json()

    return Response(await asyncio.to_thread(build), media_type="application/json")
