"""Question forms (skills/ask-user-questions): the agent opens `forms/<id>.json` with show_file, the
client writes answers into SessionUIState.activeForm and sets submitted/dismissed; the runtime
delivers that as a trusted system_update (steer: the next turn, or now for an active task) and sets
the form `delivered` once the injection is in the transcript. Answers given while dormant are
restored from state.json and delivered at wake."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from services.runtime.store.transcript import Transcript
from services.runtime.ui.liveui import UiHost
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.inbox import Injection
from shared.trust.trusted_blocks import Body, lines, quoted, render

Deliver = Callable[[Injection, str | None], Awaitable[None]]


def form_content(form: dict[str, object]) -> str:
    """The answers are the user's words: quoted as data inside the update, never the harness's own
    (docs/architecture.md "Trust boundaries")."""
    body: Body
    if form["status"] == "submitted":
        answers = form.get("answers") or {}
        assert isinstance(answers, dict)
        text = "\n".join(f"- {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(answers.items()))
        body = lines("The user submitted the form. Their answers:", quoted("user", text or "(no answers)"))
    else:
        body = "The user dismissed the form without answering. Continue with your stated defaults."
    return render("system_update", {"source": "form", "form": str(form["id"]), "status": str(form["status"])}, body)


async def deliver_answered_form(sid: str, ui: UiHost, transcript: Transcript, deliver: Deliver) -> None:
    form = (await ui.document()).answered_form()
    if form is None:
        return
    source_id = f"form:{form['id']}:{form['status']}"
    if ("client", source_id) in transcript.sources:
        await form_delivered(ui, str(form["id"]))  # recorded before a crash: finish the hand-off
        return
    inj = Injection(session_id=sid, injection=RuntimeInjection(kind="system_update", content=form_content(form)),
                    source="client", source_id=source_id)
    await deliver(inj, None)  # restored from state.json: no inbox entry to ack


async def form_delivered(ui: UiHost, form_id: str) -> None:
    update = await (await ui.document()).mark_form_delivered(form_id)
    if update:
        await ui.persist_ui()
        await ui.publish_ui(update)
