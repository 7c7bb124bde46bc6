"""The shared state of an AG-UI run (docs/integration.md "AG-UI"): the task list, the active skills and
SessionUIState, as one JSON object.

`STATE_SNAPSHOT` sends it whole at a run's start; every later change goes as `STATE_DELTA`, an RFC 6902
JSON Patch made by the `jsonpatch` library from the state before and after. The UI part follows the
runtime's `ui_update` events: each is a Yjs update applied to a copy of the session's document, which
is seeded from the same full update `GET /ui` answers with (Yjs updates are idempotent, so an update
the seed already holds changes nothing). The document is read back through `shared.ui.uimerge` (its
thread sized for the document cap), never on the event loop.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import jsonpatch
from pycrdt import Doc

from services.proxy.deps import Proxy
from services.proxy.dormant.preview import read_todo, read_transcript, read_ui
from services.proxy.dormant.uidoc import decode_b64, encode_b64
from services.proxy.rows import SessionState
from shared.contracts.http import UiState
from shared.contracts.records.todo import TodoList
from shared.contracts.streams.inbox import UiUpdate
from shared.storage.disk import session_paths
from shared.ui.uidoc import EMPTY_UPDATE, doc_from_snapshot
from shared.ui.uimerge import apply_change
from shared.ui.uirules import UiLimits, UiRefused

UI_CLIENT_ID = 1  # the proxy's copy never edits: any client id reads the same document


def tasks_of(todo: TodoList) -> dict[str, Any]:
    return {"revision": todo.revision, "items": [item.model_dump(mode="json") for item in todo.items]}


def active_skills(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The skills active at the end of the transcript's active branch: activations not ended since."""
    active: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry.get("type") == "skill_activation" and isinstance(entry.get("name"), str):
            active[entry["name"]] = {"name": entry["name"], "type": entry.get("skill_type") or entry.get("skillType"),
                                     "requiredBy": entry.get("required_by", entry.get("requiredBy"))}
        elif entry.get("type") == "skill_end":
            active.pop(str(entry.get("name")), None)
    return list(active.values())


class RunState:
    """The state a run's stream has sent, and the UI document it follows."""

    def __init__(self, value: dict[str, Any], ui_full: bytes, limits: UiLimits) -> None:
        self.value = value
        self.ui_full = ui_full
        self.limits = limits

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.value)

    def _delta(self, change: dict[str, Any]) -> list[dict[str, Any]]:
        after = {**self.value, **change}
        ops: list[dict[str, Any]] = jsonpatch.make_patch(self.value, after).patch
        self.value = after
        return ops

    def tasks(self, todo: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            parsed = TodoList.model_validate(todo)
        except ValueError:
            return []
        return self._delta({"tasks": tasks_of(parsed)})

    def skill(self, name: str, on: dict[str, Any] | None) -> list[dict[str, Any]]:
        kept = [s for s in self.value.get("skills", []) if s.get("name") != name]
        return self._delta({"skills": kept + ([on] if on is not None else [])})

    async def ui(self, update: bytes) -> list[dict[str, Any]]:
        def apply(doc: Doc) -> None:
            doc.apply_update(update)

        try:
            merged, _ = await apply_change(self.ui_full, UI_CLIENT_ID, apply, self.limits)
        except UiRefused:
            return []  # the runtime validated it; one this copy cannot take changes nothing here
        self.ui_full = merged.full
        return self._delta({"ui": merged.snapshot})


async def initial_state(proxy: Proxy, state: SessionState) -> RunState:
    """The session's state now: todo.json and the transcript (the runtime writes them before it sends
    their events), and the UI as `GET /ui` answers it (the live runtime's document, else state.json)."""
    paths = session_paths(proxy.settings.storage.data_dir, state.row.id)

    def read() -> tuple[TodoList, list[dict[str, Any]], dict[str, Any]]:
        return read_todo(paths), active_skills(read_transcript(paths)), read_ui(paths)

    todo, skills, ui = await asyncio.to_thread(read)
    full = doc_from_snapshot(ui).get_update()
    if state.status() == "live":
        reply = await proxy.forward(UiUpdate(session_id=state.row.id, update=encode_b64(EMPTY_UPDATE), snapshot=None))
        if reply.status == 200 and reply.body is not None:
            live = UiState.model_validate(reply.body)
            ui, full = live.snapshot, decode_b64(live.update)
    return RunState({"tasks": tasks_of(todo), "skills": skills, "ui": ui}, full, UiLimits.of(proxy.settings))
