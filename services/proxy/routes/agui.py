"""`POST /sessions/{sid}/ag-ui`: one AG-UI run (docs/integration.md "AG-UI").

A translation layer over the message intake and the events stream: the body (`RunAgentInput`) becomes
the `POST /messages` prompt (`intake.accept_prompt`: the same auth, ownership, quotas, causal stamp and
busy rules; the text reaches the model as the user's, never as a harness block), and the run's events
come back as AG-UI events (`agui_stream`). Each run is recorded once, under its `Idempotency-Key` or
else its `runId`: the same run posted again (a retry, or `GammaAgent.connect()` reattaching) sends no
second prompt and streams the run again, after `Last-Event-ID` when the client names its cursor; the
same key with another message or answer is a 422.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import APIRouter, Depends, Header, Request
from pydantic import BaseModel

from services.proxy.agui.agui_input import RunRequest, read_input
from services.proxy.agui.agui_state import initial_state
from services.proxy.agui.agui_stream import RunStream, run_frames
from services.proxy.agui.agui_translate import Translator
from services.proxy.deps import Proxy, get_proxy
from services.proxy.edge.errors import ApiError
from services.proxy.edge.sse_response import EventStreamResponse
from services.proxy.idempotency import HEADER, MAX_KEY_CHARS
from services.proxy.intake import accept_prompt
from services.proxy.liveness import owned_session
from services.proxy.rows import SessionState
from shared.redis import keys
from shared.redis.redis_wire import text

router = APIRouter(prefix="/sessions", tags=["ag-ui"])
CURSOR = re.compile(r"^\d{1,20}-\d{1,20}(\.\d{1,6})?$")  # agui_stream.parse_cursor


class RunRecord(BaseModel):
    fingerprint: str
    run_id: str
    start: str  # the newest events entry before the prompt
    prompt_id: str | None = None  # set once the prompt is accepted


async def _newest(proxy: Proxy, sid: str) -> str:
    newest: Any = await proxy.redis.xrevrange(keys.events(sid), count=1)
    return text(newest[0][0]) if newest else "0"


async def _claim(proxy: Proxy, key: str, request: RunRequest, sid: str) -> tuple[RunRecord, bool]:
    """The run's record, and whether this request made it (False: the run was posted before)."""
    ttl = proxy.settings.sessions.idempotency_ttl_s
    record = RunRecord(fingerprint=request.fingerprint, run_id=request.run_id, start=await _newest(proxy, sid))
    if await proxy.redis.set(key, record.model_dump_json(), nx=True, ex=ttl):
        return record, True
    raw = await proxy.redis.get(key)
    if raw is None:  # expired between the two calls: claim it again
        return await _claim(proxy, key, request, sid)
    stored = RunRecord.model_validate_json(raw)
    if stored.fingerprint != request.fingerprint or stored.run_id != request.run_id:
        raise ApiError(422, "this run id (or Idempotency-Key) was used for another request")
    if stored.prompt_id is None and request.message is not None:
        raise ApiError(409, "this run is still being accepted; retry in a moment")
    return stored, False


async def _submit(proxy: Proxy, state: SessionState, key: str, record: RunRecord, request: RunRequest) -> RunRecord:
    if request.message is None:
        return record
    try:
        accepted = await accept_prompt(proxy, state, request.message)
    except BaseException:
        await proxy.redis.delete(key)  # nothing was sent: a retry may try again
        raise
    record = record.model_copy(update={"prompt_id": accepted.prompt_id})
    await proxy.redis.set(key, record.model_dump_json(), xx=True, keepttl=True)
    return record


BODY = {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["threadId", "runId", "messages"],
    "description": "AG-UI 1.0 `RunAgentInput` (validated with the ag-ui-protocol package's own model): threadId is "
                   "the session id; the last message is the user's new one, or `resume` answers the question that "
                   "ended the previous run (docs/integration.md \"AG-UI\")"}}}}


@router.post("/{sid}/ag-ui", response_class=EventStreamResponse, openapi_extra={"requestBody": BODY}, responses={
    200: {"description": "text/event-stream: `data: <AG-UI event JSON>` frames (LF only), `id:` the resume cursor "
          "for Last-Event-ID; comment lines are heartbeats", "content": {"text/event-stream": {}}},
    400: {"description": "invalid Last-Event-ID or Idempotency-Key"}, 401: {"description": "missing or unknown token"},
    404: {"description": "no such session for this user"},
    409: {"description": "the same run is still being accepted, or on_busy rules refused the prompt"},
    422: {"description": "not a RunAgentInput, threadId is not the session, no new user message, a resume that "
                         "answers no question of this session, or a run id / Idempotency-Key reused for another request"},
    429: {"description": "the user has GAMMA_SSE_MAX_STREAMS_PER_USER event streams open"},
})
async def ag_ui_run(
    request: Request,
    last_event_id: str | None = Header(None),
    idempotency_key: str | None = Header(None, alias=HEADER),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> EventStreamResponse:
    sid, user = state.row.id, state.row.owner
    if last_event_id is not None and not CURSOR.match(last_event_id):
        raise ApiError(400, "Last-Event-ID must be the `id:` of a frame this route sent")
    if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY_CHARS:
        raise ApiError(400, f"{HEADER} must be 1 to {MAX_KEY_CHARS} characters")
    try:
        raw = json.loads(await request.body())
    except ValueError as exc:
        raise ApiError(422, "the body is not JSON") from exc
    run = read_input(raw, sid)
    cap = proxy.settings.limits.sse_max_streams_per_user
    if proxy.fanout.streams_of(user) >= cap:
        raise ApiError(429, f"too many open event streams: at most {cap} per user; close one first")
    key = keys.agui_run(sid, "key:" + idempotency_key if idempotency_key else "run:" + run.run_id)
    record, fresh = await _claim(proxy, key, run, sid)
    run_state = await initial_state(proxy, state)
    if fresh:
        record = await _submit(proxy, state, key, record, run)
    translator = Translator(thread_id=sid, run_id=run.run_id, prompt_id=record.prompt_id)
    stream = RunStream(sid=sid, user=user, start=record.start, after=last_event_id)
    return EventStreamResponse(
        run_frames(proxy.fanout, proxy.redis, stream, translator, run_state, finished=run.message is None),
        media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
