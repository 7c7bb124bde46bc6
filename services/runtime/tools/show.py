"""show_file / show_gamma: open a tab in SessionUIState; show_gamma can create a deck document, and with
only `doc` returns the current deck and its revision (the live deck the user may have edited)."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from services.runtime.engine.types import Tool, ToolContext, ToolOutcome
from services.runtime.store.document_reads import stale_write
from services.runtime.tools.files import PATH, file_ref
from services.runtime.tools.image_view import image_outcome, is_image
from services.runtime.tools.ports import DisplayHost
from shared.contracts.records.documents import Deck, StoredDeck
from shared.contracts.records.ui import ActiveForm
from shared.mcp.tool_schema import ToolArgs, optional
from shared.storage import workspace_fs
from shared.storage.disk import DiskError, atomic_write_json, read_json

DOC_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # fullmatch: `$` would also take a trailing newline
CARD_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
FORM_PATH = re.compile(r"^forms/([A-Za-z0-9_-]{1,128})\.json$")


async def _show_form(host: DisplayHost, rel: str) -> ToolOutcome:
    """A form file opened with show_file becomes the session's activeForm (ask-user-questions)."""
    form_id = FORM_PATH.match(rel).group(1)  # type: ignore[union-attr]
    try:
        raw = json.loads(await asyncio.to_thread(workspace_fs.read_bytes, host.paths.workspace, rel))
        form = ActiveForm.model_validate(raw)
    except DiskError as exc:
        return ToolOutcome(content=str(exc), is_error=True)
    except json.JSONDecodeError as exc:
        return ToolOutcome(content=f"{rel} is not valid JSON: {exc}", is_error=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()))
        return ToolOutcome(content=f"Invalid form schema in {rel}: field {field!r}: {err.get('msg')}", is_error=True)
    problem = None
    if form.id != form_id:
        problem = f"field 'id' is {form.id!r} but the file name says {form_id!r}"
    elif form.status != "open":
        problem = "field 'status' must be 'open' (the client sets submitted or dismissed)"
    elif form.answers:
        problem = "field 'answers' must be empty: the user writes the answers"
    else:
        for f in form.fields:
            if f.kind in ("choice", "multi_choice") and len(f.options) < 2:
                problem = f"field 'fields.{f.id}.options' needs at least 2 options for a {f.kind}"
                break
    if problem:
        return ToolOutcome(content=f"Invalid form schema in {rel}: {problem}", is_error=True)
    tab = await host.show_form(form.model_dump(by_alias=True))
    return ToolOutcome(content=f"Opened form:{form.id} in tab {tab}; it is the session's active form.",
                       details={"ari": f"form:{form.id}", "tabId": tab, "form": form.id})


TAB_TITLE = "Optional tab title."


class ShowFileArgs(ToolArgs):
    path: str = Field(description=PATH)
    title: str = optional(TAB_TITLE)
    look: bool = optional("For an image file: also return the image to you.")


def show_file_tool(host: DisplayHost) -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        try:  # opened beneath the workspace: a planted link cannot point a tab out of it
            opened = await asyncio.to_thread(workspace_fs.open_entry, host.paths.workspace, args["path"])
        except DiskError as exc:
            missing = f"No such file: {args['path']}"
            return ToolOutcome(content=missing if exc.status == 404 else str(exc), is_error=True)
        os.close(opened.fd)
        rel = opened.rel
        if FORM_PATH.match(rel):
            return await _show_form(host, rel)
        ari = file_ref(rel)
        tab = await host.open_tab(ari, args.get("title") or rel.rsplit("/", 1)[-1])
        opened_note = ToolOutcome(content=f"Opened {ari} in tab {tab}.", details={"ari": ari, "tabId": tab})
        if not (args.get("look") and await is_image(host, rel)):
            return opened_note
        seen = await image_outcome(host, rel)
        return seen.model_copy(update={"content": f"{opened_note.content} {seen.content}",
                                       "details": {"ari": ari, "tabId": tab, **(seen.details or {})}})

    return Tool.typed(
        name="show_file",
        description="Open a workspace file in a tab of the user's interface. For an image, `look: true` also "
        "returns the image to you.",
        arguments=ShowFileArgs,
        execute=execute,
    )


async def _read_deck(host: DisplayHost, doc: str, path: Path, title: str | None, at: str) -> ToolOutcome:
    """Only `doc`: open the tab and hand the agent the live deck (the user may have edited it since
    the agent last saw it) with its revision, so it reads before it changes anything."""
    current = await asyncio.to_thread(read_json, path)  # None: no such document
    if not isinstance(current, dict):
        return ToolOutcome(content=f"Document {doc!r} does not exist; pass `deck` to create it.", is_error=True)
    ari = f"gamma:file:{doc}"
    tab = await host.open_tab(ari + at, title or str(current.get("title") or doc))
    revision = current.get("revision")
    if isinstance(revision, int):
        host.document_reads.saw(ari, revision)  # the deck a later write must still find (document_reads.py)
    deck = json.dumps({k: v for k, v in current.items() if k != "revision"}, ensure_ascii=False)
    return ToolOutcome(content=f"Opened {ari} in tab {tab}. Current deck (revision {revision}):\n{deck}",
                       details={"ari": ari, "tabId": tab, "created": False, "revision": revision})


class ShowGammaArgs(ToolArgs):
    doc: str = Field(description="Document id, e.g. 'q3-review'.")
    title: str = optional(TAB_TITLE)
    deck: dict[str, Any] = optional("The complete deck to store before opening.")
    card: str = optional("Optional card id to show: the deck's tab (an open one is reused) "
                      "scrolls to it.")


def show_gamma_tool(host: DisplayHost) -> Tool:
    async def execute(args: dict[str, Any], _: ToolContext) -> ToolOutcome:
        doc = args["doc"]
        if not DOC_RE.fullmatch(doc) or doc in {".", ".."}:
            return ToolOutcome(content=f"Invalid document id {doc!r}: use letters, digits, '.', '_' or '-'.",
                               is_error=True)
        card = args.get("card")
        if card is not None and not (isinstance(card, str) and CARD_RE.fullmatch(card)):
            return ToolOutcome(content=f"Invalid card id {card!r}: use letters, digits, '.', ':', '_' or '-'.",
                               is_error=True)
        at = f"#{card}" if card else ""  # the tab's location: same tab as the deck's (shared/ari.py)
        path = host.paths.document(doc)
        deck_args = args.get("deck")
        if deck_args is None:
            return await _read_deck(host, doc, path, args.get("title"), at)
        try:
            deck = Deck.model_validate(deck_args)
        except ValidationError as exc:
            return ToolOutcome(content=f"Invalid deck: {exc.errors()[0].get('msg')}", is_error=True)
        ari = f"gamma:file:{doc}"
        read = host.document_reads.revision(ari)

        def check_and_write() -> tuple[StoredDeck | None, int | None]:
            """The check and the write in one guarded write: a user's edit (a live PATCH, another
            guarded write of this session) lands before the check or after the write, never between."""
            previous = read_json(path)
            current = int(previous.get("revision", 0)) if isinstance(previous, dict) else None
            if current is not None and stale_write(ari, doc, current, read) is not None:
                return None, current
            stored = StoredDeck(**deck.model_dump(), revision=(current or 0) + 1)
            atomic_write_json(path, stored)
            return stored, current

        stored, current = await host.guarded_write(check_and_write)
        if stored is None:
            assert current is not None
            stale = stale_write(ari, doc, current, read) or ""
            return ToolOutcome(content=stale, is_error=True, details={"ari": ari, "stale": True, "revision": current})
        revision = stored.revision
        host.document_reads.saw(ari, revision)
        created = current is None
        await host.artifact_changed(ari, "document", document=stored.model_dump())
        tab = await host.open_tab(ari + at, args.get("title") or deck_args.get("title") or doc)
        verb = "Created and opened" if created else "Opened"
        return ToolOutcome(content=f"{verb} {ari} in tab {tab}.",
                           details={"ari": ari, "tabId": tab, "created": created, "revision": revision})

    return Tool.typed(
        name="show_gamma",
        description="Open a Gamma document (deck) in a tab of the user's interface. Pass `deck` "
        "({title, theme, metadata, assets, cards: [{id, ...}]}) to create or replace it first; with only "
        "`doc`, the result carries the current deck JSON and its revision (read it before editing). Replacing "
        "a deck changed since you last read or wrote it is refused: read it again first.",
        arguments=ShowGammaArgs,
        execute=execute,
    )
