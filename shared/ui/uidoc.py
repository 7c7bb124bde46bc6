"""SessionUIState as a Yjs document, built the same way by every side that rebuilds it from `state.json`.

The shape both sides agree on: one root `Y.Map` named `state`; the snapshot's top-level
keys are its keys; nested objects are `Y.Map`, lists `Y.Array`; V1 updates only.

`doc_from_snapshot` is deterministic: the client id is derived from the snapshot's content and keys
are inserted in sorted order, so one snapshot always gives byte-identical updates. A client that
seeded its document from the proxy's dormant `GET /ui` can keep sending incremental updates after the
wake if the runtime rebuilds its document with this same function (its first items then exist in
both documents); a second fetch of the same state merges nothing new.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from pycrdt import Array, Doc, Map

from shared.ui.uirules import MAX_DEPTH, UiRefused, count_values

ROOT = "state"
EMPTY_UPDATE = b"\x00\x00"  # a valid V1 update that changes nothing


def to_shared(value: Any) -> Any:
    """JSON -> prelim Y types: dict -> Map (sorted keys), list -> Array, scalars as they are."""
    if isinstance(value, dict):
        return Map({k: to_shared(value[k]) for k in sorted(value)})
    if isinstance(value, list):
        return Array([to_shared(v) for v in value])
    return value


def normalize(value: Any) -> Any:
    """Yjs numbers come back as floats (3 -> 3.0): integral floats become ints; bytes become base64;
    keys sorted (yrs maps have no stable order)."""
    if isinstance(value, dict):
        return {str(k): normalize(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    return value


def content_client_id(snapshot: dict[str, Any]) -> int:
    digest = hashlib.sha256(json.dumps(snapshot, sort_keys=True, separators=(",", ":")).encode()).digest()
    # 31 bits: inside the range yjs itself uses, and never 0.
    return (int.from_bytes(digest[:4], "big") & 0x7FFFFFFF) or 1


def doc_from_snapshot(snapshot: dict[str, Any]) -> Doc:
    doc: Doc = Doc(client_id=content_client_id(snapshot))
    root = doc.get(ROOT, type=Map)
    with doc.transaction(origin="state.json"):
        for key in sorted(snapshot):
            root[key] = to_shared(snapshot[key])
    return doc


def snapshot_of(doc: Doc) -> dict[str, Any]:
    """The root map as JSON, keys sorted. Through yrs' own JSON export (`str(map)`), linear in the
    document: pycrdt's `to_py` reads arrays by index and is quadratic in the number of blocks (20,000
    separately inserted items: 1.2 s per call). The export recurses once per nesting level: call it
    on a document of unknown depth only through `shared.ui.uimerge` (a thread with a stack sized for the
    document cap). A RecursionError from `json.loads` means nested past ~1000 levels."""
    try:
        raw = json.loads(str(doc.get(ROOT, type=Map)))
    except RecursionError as exc:
        raise UiRefused(422, f"UI state is nested deeper than {MAX_DEPTH} levels") from exc
    depth = count_values(raw)[1]
    if depth > MAX_DEPTH:  # before recursing over it here
        raise UiRefused(422, f"UI state is nested {depth} deep; the limit is {MAX_DEPTH}")
    out = normalize(raw)
    assert isinstance(out, dict)
    return out


def copy_doc(full_update: bytes, client_id: int) -> Doc:
    """A document holding `full_update`, editing as `client_id` (the original's: swapped in for it)."""
    doc: Doc = Doc(client_id=client_id)
    doc.get(ROOT, type=Map)
    doc.apply_update(full_update)
    return doc
