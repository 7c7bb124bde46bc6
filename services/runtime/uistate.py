"""SessionUIState as a Yjs document: one root Y.Map `state` (DESIGN.md "SessionUIState as a Yjs document").

Nested objects are Y.Map and lists Y.Array, so the client and the agent merge per field. The JSON
snapshot (`state.json`) is `state.to_py()` with integral floats turned back into ints.

The document is rebuilt from `state.json` with `shared.uidoc.doc_from_snapshot`, the same function the
proxy uses for a dormant `GET /ui`: a client that seeded its document from those bytes shares every
item with ours, so its incremental updates still integrate after the wake. Our own edits then use a
fresh random client id, so they can never collide with items another rebuild of the same snapshot
(the proxy's, an earlier wake's) made under the content-derived id.
"""

from __future__ import annotations

import base64
from typing import Any

from pycrdt import Array, Doc, Map

from shared.contracts.ui import SCHEMA_VERSION, SessionUIState
from shared.uidoc import ROOT, doc_from_snapshot, to_shared


def default_snapshot() -> dict[str, Any]:
    """What the proxy serves for a session without `state.json` (its `default_snapshot`)."""
    dumped = SessionUIState().model_dump(mode="json", by_alias=True)
    assert isinstance(dumped, dict)
    return dumped


_MISSING = object()


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalize(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class UiDoc:
    def __init__(self) -> None:
        self.doc: Doc = Doc()
        self.state: Map = self.doc.get(ROOT, type=Map)

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any] | None) -> UiDoc:
        ui = cls()
        base = doc_from_snapshot(snapshot if snapshot is not None else default_snapshot())
        ui.doc.apply_update(base.get_update())  # the same items, ids included; our own client id
        ui.state = ui.doc.get(ROOT, type=Map)
        if "schemaVersion" not in ui.state:
            with ui.doc.transaction(origin="restore"):
                ui.state["schemaVersion"] = SCHEMA_VERSION
        return ui

    def snapshot(self) -> dict[str, Any]:
        return dict(_normalize(self.state.to_py() or {}))

    def full_update_b64(self) -> str:
        return base64.b64encode(self.doc.get_update()).decode()

    def apply_update(self, update: bytes) -> bytes:
        """Merge a client V1 update; returns what changed (empty when nothing did).

        Raises ValueError / RuntimeError on malformed bytes (the caller answers 400).
        """
        before = self.doc.get_state()
        self.doc.apply_update(update)
        if self.doc.get_state() == before:
            return b""
        return bytes(self.doc.get_update(before))

    def apply_snapshot(self, snapshot: dict[str, Any]) -> bytes:
        """Make the document equal a (validated) snapshot: the top-level keys that differ are written,
        keys the snapshot lacks removed, all in one transaction. Returns the update (empty: no change).
        For clients that send only snapshots: their state still reaches the live document."""
        current = self.snapshot()
        target = _normalize(snapshot)
        before = self.doc.get_state()
        with self.doc.transaction(origin="client-snapshot"):
            for key in [k for k in current if k not in target]:
                del self.state[key]
            for key in sorted(target):
                if current.get(key, _MISSING) != target[key]:
                    self.state[key] = to_shared(snapshot[key])
        if self.doc.get_state() == before:
            return b""
        return bytes(self.doc.get_update(before))

    def open_tab(self, ari: str, title: str | None) -> tuple[str, bytes]:
        """Open (or focus) a tab for `ari` in the first pane; returns (tab id, the update produced)."""
        before = self.doc.get_state()
        with self.doc.transaction(origin="agent"):
            tabs = self._map("tabs")
            panes = self._array("panes")
            active = self._map("activeTabByPane")
            tab_id = next((k for k, v in tabs.items() if isinstance(v, Map) and v.get("ari") == ari), None)
            if len(panes) == 0:
                panes.append(Map({"id": "main", "tabIds": Array([])}))
            pane = panes[0]
            if tab_id is None:
                tab_id = f"t{len(tabs) + 1}"
                while tab_id in tabs:
                    tab_id += "x"
                tab = {"id": tab_id, "ari": ari}
                if title:
                    tab["title"] = title
                tabs[tab_id] = Map(tab)
                tab_ids = pane.get("tabIds") if isinstance(pane, Map) else None
                if not isinstance(tab_ids, Array):
                    tab_ids = Array([])
                    pane["tabIds"] = tab_ids
                tab_ids.append(tab_id)
            active[str(pane.get("id", "main")) if isinstance(pane, Map) else "main"] = tab_id
            recent = self._array("recentResources")
            items = [str(x) for x in recent]
            if ari in items:
                del recent[items.index(ari)]
            recent.insert(0, ari)
            while len(recent) > 20:
                recent.pop()
        return tab_id, bytes(self.doc.get_update(before))

    def set_form(self, form: dict[str, Any]) -> bytes:
        """The agent's question form becomes the one activeForm (a new one replaces an open one)."""
        before = self.doc.get_state()
        with self.doc.transaction(origin="agent"):
            self.state["activeForm"] = to_shared(form)
        return bytes(self.doc.get_update(before))

    def answered_form(self) -> dict[str, Any] | None:
        """The activeForm once the client submitted or dismissed it (and before it was delivered)."""
        form = self.snapshot().get("activeForm")
        if isinstance(form, dict) and form.get("status") in ("submitted", "dismissed") and form.get("id"):
            return form
        return None

    def mark_form_delivered(self, form_id: str) -> bytes:
        before = self.doc.get_state()
        form = self.state.get("activeForm")
        if isinstance(form, Map) and form.get("id") == form_id:
            with self.doc.transaction(origin="agent"):
                form["status"] = "delivered"
        return bytes(self.doc.get_update(before))

    def _map(self, key: str) -> Map:
        value = self.state.get(key)
        if not isinstance(value, Map):
            value = Map(dict(value) if isinstance(value, dict) else {})
            self.state[key] = value
        return value

    def _array(self, key: str) -> Array:
        value = self.state.get(key)
        if not isinstance(value, Array):
            value = Array(list(value) if isinstance(value, list) else [])
            self.state[key] = value
        return value
