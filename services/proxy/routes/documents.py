"""Gamma documents `GET|PUT|PATCH /sessions/{sid}/documents/{doc}`: decks with a revision.

The stored form is `StoredDeck` (`documents/{doc}.json`). PUT replaces the deck, PATCH merges cards by
id (`shared.contracts.records.documents.merge_cards`). `If-Match: <revision>` that is not the current one is a
409. Same liveness rule as files: live -> `DocumentEdit` / `DocumentDelete` to the runtime; dormant
(also never woken) -> the proxy writes a new or existing document, or removes one, under the
dormant-write lock, and the session stays dormant. Both sides apply the edit with
`shared.ui.write_model.edit_document` (`delete_document`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Body, Depends, Header
from fastapi.responses import JSONResponse

from services.proxy.artifacts import client_digest, document_changed, document_deleted
from services.proxy.deps import Proxy, get_proxy, tracking
from services.proxy.dormant import disk_budget
from services.proxy.edge.errors import DISK_ERRORS, ApiError
from services.proxy.liveness import apply_if_dormant, owned_session, refused
from services.proxy.rows import SessionState
from shared.contracts.http import DocumentDeleted
from shared.contracts.records.documents import Deck, StoredDeck
from shared.contracts.streams.inbox import DocumentDelete, DocumentEdit
from shared.storage.disk import SessionPaths, session_paths
from shared.ui import write_model
from shared.ui.write_model import DocOp, Refused

router = APIRouter(prefix="/sessions", tags=["documents"])
PATCH_KEYS = {"title", "theme", "metadata", "assets", "cards", "order"}
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "invalid document id or If-Match header"},
    401: {"description": "missing or unknown token"},
    404: {"description": "no such session or document"},
    **DISK_ERRORS,
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS, 409: {"description": "stale If-Match revision, or the session is waking"},
    504: {"description": "runtime timeout"},
}


def parse_if_match(header: str | None) -> int | None:
    if header is None or not header.strip() or header.strip() == "*":
        return None
    text = header.strip().removeprefix("W/").strip('"')
    if not text.isdigit():
        raise ApiError(400, f"If-Match must be a document revision number, got {header!r}")
    return int(text)


def read_deck(paths: SessionPaths, doc: str) -> StoredDeck | None:
    deck = write_model.read_deck(paths, doc)
    if isinstance(deck, Refused):
        raise refused(deck)
    return deck


def _deck_response(deck: StoredDeck | dict[str, Any], status: int = 200) -> JSONResponse:
    body = deck.model_dump(mode="json") if isinstance(deck, StoredDeck) else deck
    return JSONResponse(body, status_code=status, headers={"ETag": f'"{body.get("revision", 0)}"'})


@router.get("/{sid}/documents/{doc}", response_model=StoredDeck, responses=ERRORS)
async def get_document(doc: str, state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy)) -> JSONResponse:
    deck = await asyncio.to_thread(read_deck, session_paths(proxy.settings.storage.data_dir, state.row.id), doc)
    if deck is None:
        raise ApiError(404, f"no document {doc!r} in this session")
    return _deck_response(deck)


@router.put("/{sid}/documents/{doc}", response_model=StoredDeck, responses=WRITE_ERRORS)
async def put_document(
    doc: str, body: Deck, if_match: str | None = Header(None), x_gamma_digest: str | None = Header(None),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> JSONResponse:
    return await _edit(proxy, state, doc, "put", body.model_dump(mode="json"), parse_if_match(if_match),
                       client_digest(x_gamma_digest))


@router.patch("/{sid}/documents/{doc}", response_model=StoredDeck, responses={**WRITE_ERRORS, 422: {"description": "invalid patch"}})
async def patch_document(
    doc: str, body: dict[str, Any] = Body(..., examples=[{"cards": [{"id": "card_1", "title": "New title"}]}]),
    if_match: str | None = Header(None), x_gamma_digest: str | None = Header(None),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> JSONResponse:
    unknown = sorted(set(body) - PATCH_KEYS)
    if unknown:
        raise ApiError(422, f"unknown deck fields in patch: {', '.join(unknown)}; allowed: {', '.join(sorted(PATCH_KEYS))}")
    return await _edit(proxy, state, doc, "patch", body, parse_if_match(if_match), client_digest(x_gamma_digest))


async def _edit(
    proxy: Proxy, state: SessionState, doc: str, op: DocOp, document: dict[str, Any],
    if_match: int | None, digest: str | None,
) -> JSONResponse:
    sid = state.row.id
    paths = session_paths(proxy.settings.storage.data_dir, sid)
    paths.document(doc)  # refuse a bad id (400) before anything else
    # What the stored deck may grow by, at most: the body's own JSON (a 507 here writes nothing).
    await disk_budget.admit(proxy, state.row.owner, len(json.dumps(document, separators=(",", ":"))), "this document")
    applied = await apply_if_dormant(proxy, state, "document", lambda: asyncio.to_thread(
        write_model.edit_document, paths, doc, op, document, if_match))
    if applied is not None:
        new = applied.value
        await document_changed(proxy.broker, sid, doc, new.model_dump(mode="json"), new.revision - 1, new.revision, digest,
                               track=tracking(proxy))
        return _deck_response(new)
    current = await asyncio.to_thread(read_deck, paths, doc) if op == "patch" else None
    if current is not None:
        # Refuse a malformed patch with the same 422 as the dormant path before the runtime sees it.
        checked = write_model.edited_deck(current, op, document)
        if isinstance(checked, Refused):
            raise refused(checked)
    message = DocumentEdit(session_id=sid, doc=doc, op=op, document=document, if_match=if_match)
    reply = await proxy.forward(message)
    revision = reply.body.get("revision")
    if isinstance(revision, int) and reply.status == 200:
        await document_changed(proxy.broker, sid, doc, reply.body, revision - 1 if revision > 0 else None, revision, digest,
                               track=tracking(proxy))
    return _deck_response(reply.body, reply.status)


@router.delete("/{sid}/documents/{doc}", response_model=DocumentDeleted, responses={
    **WRITE_ERRORS, 200: {"description": "{doc, deleted: true, revision}: the revision the deck had"},
})
async def delete_document(
    doc: str, if_match: str | None = Header(None), x_gamma_digest: str | None = Header(None),
    state: SessionState = Depends(owned_session), proxy: Proxy = Depends(get_proxy),
) -> JSONResponse:
    """Remove a deck; the agent is told in its next `artifact_update`."""
    sid = state.row.id
    paths = session_paths(proxy.settings.storage.data_dir, sid)
    paths.document(doc)  # refuse a bad id (400) before anything else
    expected, digest = parse_if_match(if_match), client_digest(x_gamma_digest)
    applied = await apply_if_dormant(proxy, state, "document_delete", lambda: asyncio.to_thread(
        write_model.delete_document, paths, doc, expected))
    if applied is not None:
        await document_deleted(proxy.broker, sid, doc, digest, track=tracking(proxy))
        return JSONResponse({"doc": doc, "deleted": True, "revision": applied.value.revision})
    reply = await proxy.forward(DocumentDelete(session_id=sid, doc=doc, if_match=expected))
    await document_deleted(proxy.broker, sid, doc, digest, track=tracking(proxy))
    return JSONResponse(reply.body, status_code=reply.status)
