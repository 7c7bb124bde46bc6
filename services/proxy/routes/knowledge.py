"""Workspace knowledge notes `PUT|GET|DELETE /knowledge/{id}`, `GET /knowledge` (shared/history/knowledge.py).

Notes belong to the authenticated user (the owner of their sessions), outside any session; the proxy
is their only writer. A write or delete is then announced to each of the owner's live sessions as a
`workspace_update` injection (source id `knowledge:{id}@{revision}`, so a redelivery or the runtime's
own check at the next prompt records it once). A dormant session gets nothing: its next prompt's
hints and revision check see the current notes.
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import APIRouter, Depends, Path
from fastapi.responses import Response

from services.proxy.auth import current_user
from services.proxy.deps import Proxy, get_proxy
from services.proxy.edge.errors import ApiError
from shared.contracts.base import now_ms
from shared.contracts.records.injection import RuntimeInjection
from shared.contracts.streams.inbox import Injection
from shared.history.knowledge import (
    NOTE_ID,
    KnowledgeBody,
    KnowledgeList,
    KnowledgeNote,
    TooManyNotes,
    all_notes,
    delete_note,
    get_note,
    pointer,
    put_note,
    source_id,
    update_text,
)
from shared.redis import keys
from shared.redis.redis_wire import text
from shared.streams import inbox

router = APIRouter(prefix="/knowledge", tags=["knowledge"])
log = structlog.get_logger()
NoteId = Path(pattern=NOTE_ID, description="Lowercase letters, digits, '.', '_' and '-'; at most 64.")
ERRORS: dict[int | str, dict[str, Any]] = {401: {"description": "missing or unknown token"},
                                           404: {"description": "no such note for this user"}}


@router.get("", response_model=KnowledgeList, responses={401: ERRORS[401]})
async def list_notes(user: str = Depends(current_user), proxy: Proxy = Depends(get_proxy)) -> KnowledgeList:
    return KnowledgeList(notes=[pointer(n) for n in await all_notes(proxy.redis, user)])


@router.get("/{note_id}", response_model=KnowledgeNote, responses=ERRORS)
async def read_note(note_id: str = NoteId, user: str = Depends(current_user),
                    proxy: Proxy = Depends(get_proxy)) -> KnowledgeNote:
    note = await get_note(proxy.redis, user, note_id)
    if note is None:
        raise ApiError(404, f"no knowledge note {note_id!r}")
    return note


@router.put("/{note_id}", response_model=KnowledgeNote, responses={
    401: ERRORS[401], 409: {"description": "the owner already has the maximum number of notes"}})
async def write_note(body: KnowledgeBody, note_id: str = NoteId, user: str = Depends(current_user),
                     proxy: Proxy = Depends(get_proxy)) -> KnowledgeNote:
    try:
        note = await put_note(proxy.redis, user, note_id, body, now_ms())
    except TooManyNotes as exc:
        raise ApiError(409, str(exc)) from exc
    await announce(proxy, user, note.id, note.revision, note)
    return note


@router.delete("/{note_id}", status_code=204, responses=ERRORS)
async def remove_note(note_id: str = NoteId, user: str = Depends(current_user),
                      proxy: Proxy = Depends(get_proxy)) -> Response:
    revision = await delete_note(proxy.redis, user, note_id)
    if not revision:
        raise ApiError(404, f"no knowledge note {note_id!r}")
    await announce(proxy, user, note_id, revision, None)
    return Response(status_code=204)


async def announce(proxy: Proxy, owner: str, note_id: str, revision: int, note: KnowledgeNote | None) -> None:
    """A `workspace_update` into the inbox of every live session of the owner (one with a lease)."""
    sids = [text(s) for s in await proxy.redis.zrange(keys.user_sessions(owner), 0, -1)]
    if not sids:
        return
    async with proxy.redis.pipeline(transaction=False) as pipe:
        for sid in sids:
            pipe.exists(keys.lease(sid))
        leased = await pipe.execute()
    content = update_text(note_id, revision, note)
    for sid, live in zip(sids, leased, strict=True):
        if live:
            await inbox.append(proxy.redis, Injection(
                session_id=sid, injection=RuntimeInjection(kind="workspace_update", content=content),
                source="system", source_id=source_id(note_id, revision)))
    log.info("knowledge_announced", owner=owner, note_id=note_id, revision=revision,
             live=sum(1 for x in leased if x))
