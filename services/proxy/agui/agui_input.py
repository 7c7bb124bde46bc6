"""An AG-UI `RunAgentInput` read into what the message intake takes (docs/integration.md "AG-UI").

The body is validated with the `ag-ui-protocol` package's own `RunAgentInput` (422 on a mismatch, as
any body). What the harness takes from it: the thread (the session), the run id, the newest message
when it is the user's (earlier messages are the client's copy of the history, which the harness
already holds), and `resume` answers to the question that ended the previous run. `tools` (frontend
tools), `context`, `state` and `forwardedProps` are accepted and not used: the model is offered no
client-executed tool (the static prompt prefix stays byte-identical), and client-authored state never
becomes the harness's (docs/architecture.md "Trust boundaries").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic import ValidationError

from services.proxy.agui.agui_translate import INTERRUPT_PREFIX
from services.proxy.edge.errors import ApiError
from shared.contracts.http import PostMessage

ANSWER_KEYS = ("answer", "text", "message")


@dataclass(frozen=True)
class RunRequest:
    run_id: str
    message: PostMessage | None  # None: a cancelled question, nothing to send
    fingerprint: str  # what the run asks for: the same key with another request is a 422


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: the text parts, in order
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str)) or None
    return None


def _answer(payload: Any) -> str | None:
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict):
        for key in ANSWER_KEYS:
            if isinstance(payload.get(key), str):
                return str(payload[key])
    return None


def _resumed(body: RunAgentInput) -> str | None:
    """The answer `resume` carries, or None for a cancelled question. 422 when it answers anything
    but the question that ended the run (`ask_` ids) or carries no text."""
    assert body.resume is not None
    answers: list[str] = []
    for entry in body.resume:
        if not entry.interrupt_id.startswith(INTERRUPT_PREFIX):
            raise ApiError(422, f"resume: unknown interrupt {entry.interrupt_id[:80]!r}")
        if entry.status == "cancelled":
            continue
        text = _answer(entry.payload)
        if text is None:
            raise ApiError(422, "resume: a resolved interrupt needs a payload: a string or {\"answer\": string}")
        answers.append(text)
    return "\n\n".join(answers) or None


def read_input(raw: Any, sid: str) -> RunRequest:
    try:
        body = RunAgentInput.model_validate(raw)
    except ValidationError as exc:
        raise ApiError(422, "the body is not an AG-UI RunAgentInput",
                       [{"loc": e["loc"], "msg": e["msg"]} for e in exc.errors()[:20]]) from exc
    if body.thread_id != sid:
        raise ApiError(422, "threadId must be the session id of the URL")
    if body.resume:
        text = _resumed(body)
    else:
        last = body.messages[-1] if body.messages else None
        if last is None or last.role != "user":
            raise ApiError(422, "the last message must be the user's new message (or send `resume`)")
        text = _text(last.content)
        if not text:
            raise ApiError(422, "the user's message has no text")
    try:
        message = PostMessage(message=text) if text is not None else None
    except ValidationError as exc:
        raise ApiError(422, f"the user's message: {exc.errors()[0]['msg']}") from exc
    asked = {"message": text, "resume": [e.interrupt_id for e in body.resume or []]}
    fingerprint = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()
    return RunRequest(run_id=body.run_id, message=message, fingerprint=fingerprint)
