"""SessionUIState as a Yjs document: one root Y.Map `state` (shared/ui/uidoc.py; docs/architecture.md "Ownership").

Nested objects are Y.Map and lists Y.Array, so the client and the agent merge per field. The JSON
snapshot (`state.json`) is the root map's JSON with integral floats turned back into ints.

The document is rebuilt from `state.json` with `shared.ui.uidoc.doc_from_snapshot`, the same function the
proxy uses for a dormant `GET /ui`: a client that seeded its document from those bytes shares every
item with ours, so its incremental updates still integrate after the wake. Our own edits then use a
fresh random client id, so they can never collide with items another rebuild of the same snapshot
(the proxy's, an earlier wake's) made under the content-derived id.

Every change (a client's update, a client's snapshot, the agent's tab or form) goes through
`shared.ui.uimerge`: made on a copy off the event loop, validated by the rule the proxy applies while
dormant (`shared.ui.uirules`), swapped in only when valid. One change at a time per document.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from pycrdt import Array, Doc, Map

from shared.ari import AriError, parse_ari
from shared.ui.form_rules import check_client_form
from shared.ui.uidoc import EMPTY_UPDATE, ROOT, doc_from_snapshot, snapshot_of, to_shared
from shared.ui.uimerge import Merged, apply_change, merge_update
from shared.ui.uirules import UiLimits, default_snapshot

__all__ = ["UiDoc", "default_snapshot"]
_MISSING = object()


class UiDoc:
    def __init__(self, doc: Doc, limits: UiLimits) -> None:
        self.doc = doc
        self.limits = limits
        self._full = bytes(doc.get_update())
        self._snapshot = snapshot_of(doc)
        self._lock = asyncio.Lock()

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any], limits: UiLimits | None = None) -> UiDoc:
        """`snapshot` is valid already (`shared.ui.uirules.repair_snapshot` of state.json)."""
        doc: Doc = Doc()
        doc.get(ROOT, type=Map)
        doc.apply_update(doc_from_snapshot(snapshot).get_update())  # the same items, ids included; our own client id
        return cls(doc, limits or UiLimits())

    @property
    def state(self) -> Map:
        return self.doc.get(ROOT, type=Map)

    def snapshot(self) -> dict[str, Any]:
        return self._snapshot

    def full_update(self) -> bytes:
        return self._full

    def full_update_b64(self) -> str:
        return base64.b64encode(self._full).decode()

    def _swap(self, merged: Merged) -> bytes:
        self.doc, self._full, self._snapshot = merged.doc, merged.full, merged.snapshot
        return merged.update

    async def apply_update(self, update: bytes) -> bytes:
        """Merge a client V1 update; returns what changed (empty when nothing did).
        Raises UiRefused: 400 malformed, 413 too large, 422 the merged state is invalid."""
        if update == EMPTY_UPDATE:  # a read (GET /ui while live): nothing to merge or check
            return b""
        async with self._lock:
            return self._swap(await merge_update(self._full, self.doc.client_id, update, self.limits, self._snapshot))

    async def _change(self, change: Any) -> tuple[bytes, Any]:
        async with self._lock:
            merged, result = await apply_change(self._full, self.doc.client_id, change, self.limits, self._snapshot)
            return self._swap(merged), result

    async def apply_snapshot(self, snapshot: dict[str, Any]) -> bytes:
        """Make the document equal a (validated) snapshot: the top-level keys that differ are written,
        keys the snapshot lacks removed, all in one transaction. Returns the update (empty: no change).
        For clients that send only snapshots: their state still reaches the live document, within what a
        client may do to the agent's form (shared/ui/form_rules.py)."""
        current, target = self._snapshot, snapshot
        check_client_form(current, target)

        def change(doc: Doc) -> None:
            state = doc.get(ROOT, type=Map)
            with doc.transaction(origin="client-snapshot"):
                for key in [k for k in current if k not in target]:
                    del state[key]
                for key in sorted(target):
                    if current.get(key, _MISSING) != target[key]:
                        state[key] = to_shared(target[key])

        return (await self._change(change))[0]

    async def open_tab(self, ari: str, title: str | None) -> tuple[str, bytes]:
        """Open (or focus) a tab for `ari` in the first pane; returns (tab id, the update produced)."""
        update, tab_id = await self._change(lambda doc: _open_tab(doc, ari, title))
        return str(tab_id), update

    async def set_form(self, form: dict[str, Any]) -> bytes:
        """The agent's question form becomes the one activeForm (a new one replaces an open one)."""

        def change(doc: Doc) -> None:
            with doc.transaction(origin="agent"):
                doc.get(ROOT, type=Map)["activeForm"] = to_shared(form)

        return (await self._change(change))[0]

    async def set_costs(self, records: list[dict[str, Any]]) -> bytes:
        """The server-owned cost records (services/runtime/ui/costs.py) replace the list."""

        def change(doc: Doc) -> None:
            with doc.transaction(origin="agent"):
                doc.get(ROOT, type=Map)["costs"] = to_shared(records)

        return (await self._change(change))[0]

    def answered_form(self) -> dict[str, Any] | None:
        """The activeForm once the client submitted or dismissed it (and before it was delivered)."""
        form = self._snapshot.get("activeForm")
        if isinstance(form, dict) and form.get("status") in ("submitted", "dismissed") and form.get("id"):
            return form
        return None

    async def mark_form_delivered(self, form_id: str) -> bytes:
        def change(doc: Doc) -> None:
            form = doc.get(ROOT, type=Map).get("activeForm")
            if isinstance(form, Map) and form.get("id") == form_id:
                with doc.transaction(origin="agent"):
                    form["status"] = "delivered"

        return (await self._change(change))[0]


def _open_tab(doc: Doc, ari: str, title: str | None) -> str:
    """Open or focus `ari`'s tab. Tab identity is the base resource (shared/ari.py): an open tab of the
    same resource takes the new reference (its view state and location) instead of a duplicate beside
    it, and is focused in the pane that holds it; each pane owns its active tab, so only that pane's
    changes (the tab rules of shared/ari.py)."""
    state = doc.get(ROOT, type=Map)
    base = _base(ari)
    with doc.transaction(origin="agent"):
        tabs = _map(state, "tabs")
        panes = _array(state, "panes")
        active = _map(state, "activeTabByPane")
        tab_id = next((k for k, v in tabs.items() if isinstance(v, Map) and _base(str(v.get("ari", ""))) == base),
                      None)
        if len(panes) == 0:
            panes.append(Map({"id": "main", "tabIds": Array([])}))
        if tab_id is None:
            tab_id = _new_tab(tabs, ari, title)
        else:
            tab = tabs[tab_id]
            if ari != base:  # a location or view state: the tab moves there; the bare resource keeps the user's
                tab["ari"] = ari
            if title:
                tab["title"] = title
        pane = _pane_of(panes, tab_id) or panes[0]
        tab_ids = _tab_ids(pane)
        if tab_id not in [str(x) for x in tab_ids]:
            tab_ids.append(tab_id)
        active[str(pane.get("id", "main")) if isinstance(pane, Map) else "main"] = tab_id
        _remember(_array(state, "recentResources"), ari, base)
    return tab_id


def _base(ari: str) -> str:
    """The tab identity of a reference (its canonical `scheme:resource`); a client-written one that
    does not parse is its own identity."""
    try:
        return str(parse_ari(ari).model_copy(update={"query": (), "location": None}))
    except AriError:
        return ari


def _new_tab(tabs: Map, ari: str, title: str | None) -> str:
    tab_id = f"t{len(tabs) + 1}"
    while tab_id in tabs:
        tab_id += "x"
    tab = {"id": tab_id, "ari": ari}
    if title:
        tab["title"] = title
    tabs[tab_id] = Map(tab)
    return tab_id


def _pane_of(panes: Array, tab_id: str) -> Map | None:
    for pane in panes:
        if isinstance(pane, Map) and tab_id in [str(x) for x in _tab_ids(pane)]:
            return pane
    return None


def _tab_ids(pane: Any) -> Array:
    tab_ids = pane.get("tabIds") if isinstance(pane, Map) else None
    if not isinstance(tab_ids, Array):
        tab_ids = Array([])
        pane["tabIds"] = tab_ids
    return tab_ids


def _remember(recent: Array, ari: str, base: str) -> None:
    """The newest reference first, one per resource, at most 20."""
    for i in reversed(range(len(recent))):
        if _base(str(recent[i])) == base:
            del recent[i]
    recent.insert(0, ari)
    while len(recent) > 20:
        recent.pop()


def _map(state: Map, key: str) -> Map:
    value = state.get(key)
    if not isinstance(value, Map):
        value = Map(dict(value) if isinstance(value, dict) else {})
        state[key] = value
    return value


def _array(state: Map, key: str) -> Array:
    value = state.get(key)
    if not isinstance(value, Array):
        value = Array(list(value) if isinstance(value, list) else [])
        state[key] = value
    return value
