"""Question forms (skills/ask-user-questions): the agent opens `forms/<id>.json` with show_file, the
client writes answers into SessionUIState.activeForm and sets submitted/dismissed; the runtime
delivers that as a trusted system_update (steer: the next turn, or now for an active task) and sets
the form `delivered` once the injection is in the transcript. Answers given while dormant are
restored from state.json and delivered at wake."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from shared.contracts.inbox import Injection
from shared.contracts.injection import RuntimeInjection
from shared.inbox import InboxEntry

if TYPE_CHECKING:
    from .session import Session


def form_content(form: dict[str, object]) -> str:
    if form["status"] == "submitted":
        answers = form.get("answers") or {}
        assert isinstance(answers, dict)
        lines = "\n".join(f"- {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in sorted(answers.items()))
        body = f"The user submitted the form.\n{lines or '(no answers)'}"
    else:
        body = "The user dismissed the form without answering. Continue with your stated defaults."
    return f'<system_update source="form" form="{form["id"]}" status="{form["status"]}">\n{body}\n</system_update>'


async def deliver_answered_form(session: Session) -> None:
    form = session.ui.answered_form()
    if form is None:
        return
    source_id = f"form:{form['id']}:{form['status']}"
    if ("client", source_id) in session.transcript.sources:
        await form_delivered(session, str(form["id"]))  # recorded before a crash: finish the hand-off
        return
    inj = Injection(session_id=session.sid, injection=RuntimeInjection(kind="system_update", content=form_content(form)),
                    source="client", source_id=source_id)
    await session.on_injection(InboxEntry(session_id=session.sid, entry_id="", message=inj), inj)


async def form_delivered(session: Session, form_id: str) -> None:
    update = await session.ui.mark_form_delivered(form_id)
    if update:
        await session.persist_ui()
        await session.writes.publish_ui(update)
