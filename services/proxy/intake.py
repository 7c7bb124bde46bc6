"""The message intake: one prompt from the user into the session's inbox (docs/architecture.md "The
life of a prompt", step 1). `POST /messages` and the AG-UI route (`routes/agui.py`) both hand their
prompt here, so both get the same checks, causal stamp, busy rules and wake."""

from __future__ import annotations

import structlog

from services.proxy.attachments import check_attachments
from services.proxy.budgets import refuse_over_budget
from services.proxy.deps import Proxy
from services.proxy.edge.errors import ApiError
from services.proxy.routes.branches import edit_rewind
from services.proxy.routes.runs import post_to_run
from services.proxy.rows import SessionState, mark_waking, touch
from shared.ari import AriError, parse_ari
from shared.contracts.http import MessageAccepted, PostMessage
from shared.contracts.streams.inbox import UserPrompt
from shared.contracts.streams.wake import Wake
from shared.redis import keys
from shared.streams import causal, inbox
from shared.streams.bus import publish

log = structlog.get_logger()


async def accept_prompt(proxy: Proxy, state: SessionState, body: PostMessage) -> MessageAccepted:
    """Validates `body` (client context ARIs, attachments, an edit), stamps it and appends it to the
    inbox; a dormant session is woken (row first, then prompt, then Wake: docs/integration.md "Wake")."""
    sid = state.row.id
    await refuse_over_budget(proxy.redis, sid, state.row.owner, proxy.settings)  # before anything changes
    if body.client_context is not None:
        for tab in body.client_context.visible_tabs:
            try:
                parse_ari(tab.ari)
            except AriError as exc:
                raise ApiError(422, f"client_context.visibleTabs: tab {tab.tab_id!r} has an invalid ARI: {exc}") from exc
    attached = await check_attachments(proxy.settings, sid, body.attachments, state.row.owner) if body.attachments else None
    if body.edit_of is not None:
        # A retried edit with its Idempotency-Key is answered from the stored response (IDEMPOTENT): no second rewind.
        state = await edit_rewind(proxy, state, body.edit_of)
    status = state.status()
    # Causal order (shared/streams/causal.py): the newest write acknowledged before this prompt whose digest is
    # still on its way; the runtime holds the prompt until it is delivered.
    after = await causal.watermark(proxy.redis, sid) if proxy.settings.runtime.causal_wait_ms > 0 else None
    prompt = UserPrompt(session_id=sid, message=body.message, client_context=body.client_context, on_busy=body.on_busy,
                        after_seq=after, expected_run_id=body.expected_run_id,
                        images=(attached.images or None) if attached else None,
                        files=(attached.files or None) if attached else None)
    if body.expected_run_id is not None:
        return await post_to_run(proxy, state, prompt)
    if status == "live":
        if body.on_busy == "reject" and state.running:
            raise ApiError(409, "the session is running and on_busy is 'reject'")
        await inbox.append(proxy.redis, prompt)
        await touch(proxy.redis, sid)
        return MessageAccepted(prompt_id=prompt.prompt_id, status="live", woke=False)
    if status == "waking":
        # The wake is under way: the new holder reads the inbox from its start, prompt included.
        await inbox.append(proxy.redis, prompt)
        return MessageAccepted(prompt_id=prompt.prompt_id, status="waking", woke=False)
    wake = Wake(session_id=sid, reason="message")
    if not await mark_waking(proxy.redis, sid, wake.wake_id, state.fence):
        raise ApiError(404, f"session {sid!r} not found")  # deleted since the row was read
    await inbox.append(proxy.redis, prompt)
    await publish(proxy.broker, keys.WAKE, wake)
    proxy.metrics.wakes.inc()
    log.info("wake_sent", session_id=sid, wake_id=wake.wake_id, prompt_id=prompt.prompt_id)
    return MessageAccepted(prompt_id=prompt.prompt_id, status="waking", woke=True)
