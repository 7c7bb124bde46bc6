"""The active run (docs/integration.md "Abort and interrupt"): POST /abort, and messages aimed at one run (`expected_run_id`).

The runtime writes the active run's id into `gamma:{sid}:running` (services/runtime/runs/supervisor.py);
the proxy reads it with the session row, so a stale `expected_run_id` is refused at once with 409 and
nothing queued. When it matches, the message is forwarded and the proxy waits for the runtime's
verdict (the run may end meanwhile: the runtime checks again when it takes the entry, and refuses
with the same 409). docs/integration.md "Abort and interrupt".
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends
from fastapi.responses import JSONResponse

from services.proxy.deps import Proxy, get_proxy
from services.proxy.edge.errors import ApiError
from services.proxy.idempotency import IDEMPOTENCY_RESPONSES, IDEMPOTENT
from services.proxy.liveness import owned_session
from services.proxy.rows import SessionState, touch
from shared.contracts.base import new_id
from shared.contracts.http import AbortBody, AbortResult, MessageAccepted
from shared.contracts.streams.inbox import Abort, UserPrompt

router = APIRouter(prefix="/sessions", tags=["sessions"])
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "missing or unknown token"},
                                           404: {"description": "no such session for this user"}}


def stale(expected: str, active: str | None) -> ApiError:
    text = f"run {expected} is no longer active" + (f"; the active run is {active}" if active else "; no run is active")
    return ApiError(409, text, {"run_id": active})


async def post_to_run(proxy: Proxy, state: SessionState, prompt: UserPrompt) -> MessageAccepted:
    """A message with `expected_run_id`: accepted only into that run (202 once the runtime has it)."""
    assert prompt.expected_run_id is not None
    if prompt.on_busy == "reject":
        raise ApiError(422, "expected_run_id goes with on_busy steer, follow_up or interrupt")
    active = state.active_run_id if state.status() == "live" else None
    if active != prompt.expected_run_id:
        raise stale(prompt.expected_run_id, active)
    await proxy.forward(prompt.model_copy(update={"request_id": new_id("r_")}))  # the runtime's 409 raises
    await touch(proxy.redis, state.row.id)
    return MessageAccepted(prompt_id=prompt.prompt_id, status="live", woke=False)


@router.post("/{sid}/abort", response_model=AbortResult, dependencies=[IDEMPOTENT], responses={
    **ERRORS, **IDEMPOTENCY_RESPONSES, 409: {"description": "expected_run_id is not the active run, or the session is waking"},
    504: {"description": "the runtime did not answer"}})
async def abort(body: AbortBody | None = Body(None), state: SessionState = Depends(owned_session),
                proxy: Proxy = Depends(get_proxy)) -> JSONResponse:
    """End the active run: the model stream is cancelled, running tools are killed, every started
    tool call gets a result saying the user stopped it. Idempotent: with no active run, 200 and
    `aborted: false`. Messages steered or queued as follow-ups into the run are kept for the next
    prompt. Answers once the run has ended."""
    expected = body.expected_run_id if body else None
    status = state.status()
    if status == "waking":
        raise ApiError(409, "the session is waking; its run has not started yet (abort once it is live)")
    if status == "dormant":
        if expected is not None:
            raise stale(expected, None)
        return JSONResponse(AbortResult(aborted=False).model_dump())
    if expected is not None and state.active_run_id != expected:
        raise stale(expected, state.active_run_id)
    # Live: forwarded even when no run shows as active, since a prompt ahead of it in the inbox may
    # be about to start one (the inbox keeps the order the user acted in).
    reply = await proxy.forward(Abort(session_id=state.row.id, expected_run_id=expected))
    return JSONResponse(reply.body or AbortResult(aborted=False).model_dump(), status_code=reply.status)
