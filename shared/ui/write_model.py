"""One write model for a session's files, documents and UI state: the proxy applies a write here
while the session is dormant (under the dormant-write lock), the runtime while it is live (under
its lease). Each function applies one write to the session's paths and returns the result or a
`Refused` (status + message); either way a refused write changes nothing on disk.

The file and document functions block on the disk: the proxy calls them off the event loop, the
runtime right after its lease check, so nothing can write between the check and the write.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from shared.contracts.records.documents import Deck, StoredDeck, merge_cards
from shared.storage import workspace_fs
from shared.storage.disk import DiskError, SessionPaths, atomic_write_json, check_size, remove_durably
from shared.storage.quota import WorkspaceQuota
from shared.storage.walk import WalkLimits
from shared.storage.workspace_tree import remove_entry, remove_tree_entry
from shared.ui.form_rules import check_client_form
from shared.ui.uidoc import doc_from_snapshot
from shared.ui.uimerge import merge_update
from shared.ui.uirules import UiLimits, UiRefused, validate_snapshot
from shared.ui.validation import validation_summary

DocOp = Literal["put", "patch"]


@dataclass(frozen=True)
class Refused:
    """A write that was not applied: the HTTP status and message the client gets."""

    status: int
    message: str
    detail: Any = None
    revision: int | None = None  # a stale If-Match: the document's current revision

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.message}
        if self.detail is not None:
            body["detail"] = self.detail
        if self.revision is not None:
            body["revision"] = self.revision
        return body

    @classmethod
    def of(cls, exc: DiskError | UiRefused) -> Refused:
        if isinstance(exc, UiRefused):
            return cls(exc.status, exc.message, exc.detail)
        cause = getattr(exc, "cause", None)  # a full or failing disk names its cause (shared/storage/disk.py)
        return cls(exc.status, str(exc), {"cause": cause} if cause else None)


# ---------------------------------------------------------------- files


@dataclass(frozen=True)
class FileWritten:
    path: str  # workspace-relative, NFC-normalised
    size: int
    created: bool = False  # a new file (the digest tells the agent "new file", not a diff)


@dataclass(frozen=True)
class Removed:
    """A deleted workspace file (`path`) or document (`doc`, with the revision it had)."""

    path: str
    revision: int | None = None
    files: tuple[str, ...] | None = None  # a removed tree: the regular files in it


def write_file(workspace: Path, path: str, data: bytes, *, max_bytes: int, quota: WorkspaceQuota,
               must_exist: bool = False) -> FileWritten | Refused:
    """The bytes at `path` beneath the workspace (no link out of it), atomically, within the quota;
    missing directories are created. Both sides create new files (docs/integration.md "Session row and liveness": an upload into a
    dormant or never-woken session); `must_exist` asks for the overwrite-only rule, for callers
    that want it."""
    try:
        check_size(data, max_bytes)
        written = workspace_fs.write_entry(workspace, path, data, must_exist=must_exist, quota=quota)
    except DiskError as exc:  # bad name, too large, a directory in the way, over quota, missing
        return Refused.of(exc)
    return FileWritten(path=written.path, size=len(data), created=written.created)


def remove_file(workspace: Path, path: str, *, tree: WalkLimits | None = None) -> Removed | Refused:
    """Delete the file at `path` beneath the workspace: a missing file is a 404, a directory a 409.
    `tree` (a recursive delete): a directory goes with everything under it, within these bounds
    (shared/storage/workspace_tree.py); `Removed.files` names the regular files that went."""
    try:
        if tree is None:
            return Removed(path=remove_entry(workspace, path))
        gone = remove_tree_entry(workspace, path, tree)
        return Removed(path=gone.path, files=tuple(gone.files))
    except DiskError as exc:
        return Refused.of(exc)


# ---------------------------------------------------------------- documents


def read_deck(paths: SessionPaths, doc: str) -> StoredDeck | None | Refused:
    """The stored deck, None when there is none; a bad id is a 400, an unreadable deck a 409."""
    try:
        raw = paths.document(doc).read_bytes()
    except FileNotFoundError:
        return None
    except DiskError as exc:
        return Refused.of(exc)
    try:
        return StoredDeck.model_validate_json(raw)
    except (ValidationError, json.JSONDecodeError) as exc:
        return Refused(409, f"document {doc!r} on disk is not a valid deck: {exc}")


def edited_deck(current: StoredDeck, op: DocOp, document: dict[str, Any]) -> Deck | Refused:
    """PUT replaces the deck, PATCH merges cards by id (`merge_cards`); an invalid result is a 422."""
    try:
        if op == "put":
            return Deck.model_validate(document)
        return merge_cards(Deck.model_validate(current.model_dump(exclude={"revision"})), document)
    except ValidationError as exc:
        message, detail = validation_summary(list(exc.errors()))
        what = "the patched deck" if op == "patch" else "the deck"
        return Refused(422, f"{what} is invalid: " + message.removeprefix("invalid request: "), detail)
    except (ValueError, TypeError, KeyError) as exc:
        return Refused(422, f"invalid patch: {exc}")


def edit_document(paths: SessionPaths, doc: str, op: DocOp, document: dict[str, Any], if_match: int | None,
                  *, create: bool = True) -> StoredDeck | Refused:
    """Apply a PUT or PATCH to `documents/{doc}.json`: If-Match must name the current revision (409),
    and the stored deck gets revision + 1 (a new deck: revision 1). `create`: a PUT may make a new
    deck (both sides do: docs/integration.md "Session row and liveness", dormant writes)."""
    current = read_deck(paths, doc)
    if isinstance(current, Refused):
        return current
    if current is None and (op == "patch" or not create):
        return Refused(404, f"no document {doc!r}")
    revision = current.revision if current else 0
    if if_match is not None and if_match != revision:
        return Refused(409, f"If-Match revision {if_match} is stale; the document is at revision {revision}",
                       revision=revision)
    deck = edited_deck(current or StoredDeck(revision=0), op, document)
    if isinstance(deck, Refused):
        return deck
    stored = StoredDeck(**deck.model_dump(), revision=revision + 1)
    atomic_write_json(paths.document(doc), stored)
    return stored


def delete_document(paths: SessionPaths, doc: str, if_match: int | None) -> Removed | Refused:
    """Remove `documents/{doc}.json` (404 when there is none; a stale If-Match is a 409)."""
    current = read_deck(paths, doc)
    if isinstance(current, Refused):
        if current.status != 409:  # an unreadable deck can still be deleted
            return current
        current = StoredDeck(revision=0)
    elif current is None:
        return Refused(404, f"no document {doc!r}")
    if if_match is not None and if_match != current.revision:
        return Refused(409, f"If-Match revision {if_match} is stale; the document is at revision {current.revision}",
                       revision=current.revision)
    if not remove_durably(paths.document(doc)):
        return Refused(404, f"no document {doc!r}")
    return Removed(path=doc, revision=current.revision)


# ---------------------------------------------------------------- UI state


def decode_update(text: str) -> bytes | Refused:
    """A Yjs update as base64 (standard alphabet, padding optional, whitespace ignored): else a 400."""
    cleaned = "".join(text.split())
    try:
        return base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        return Refused(400, f"update is not valid base64: {exc}")


async def sync_stored_ui(paths: SessionPaths, stored: dict[str, Any], update: bytes,
                         snapshot: dict[str, Any] | None, limits: UiLimits) -> dict[str, Any] | Refused:
    """A dormant session's UI sync: the update merged into the stored state under the runtime's rule
    (shared.ui.uimerge); a client's complete (validated) snapshot replaces the state instead. Written to
    state.json only when every check passed."""
    base = doc_from_snapshot(stored)
    try:
        merged = await merge_update(base.get_update(), base.client_id, update, limits, stored)
        result = validate_snapshot(merged.snapshot, limits)
        if snapshot is not None:
            check_client_form(stored, snapshot)
            result = snapshot
    except UiRefused as exc:
        return Refused.of(exc)
    await asyncio.to_thread(atomic_write_json, paths.state, result)
    return result
