"""The one rule for a SessionUIState document, live (runtime) and dormant (proxy): what a merged
document may contain and how large it may be. Refusals carry the HTTP status both sides answer with.

- 413: a Yjs update or the merged document's encoding is over its byte cap;
- 422: the snapshot is not a SessionUIState (unknown top-level key, bad ARI, bad literal...), is
  nested deeper than `MAX_DEPTH`, or holds more than `max_items` JSON values.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from pydantic import BaseModel, ValidationError

from shared.contracts.records.ui import UI_KEYS, SessionUIState
from shared.settings import Settings

log = structlog.get_logger("uirules")

# The UI state itself nests about five deep (tabs -> tab -> field); client-added values get room, but
# not the thousands of levels a hostile update can build (Yjs content never passes the JSON-body cap).
MAX_DEPTH = 32


class UiRefused(ValueError):
    def __init__(self, status: int, message: str, detail: Any | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.detail = detail


class UiLimits(BaseModel):
    max_update_bytes: int = 256 * 1024
    max_document_bytes: int = 256 * 1024
    max_items: int = 5000

    @classmethod
    def of(cls, settings: Settings) -> UiLimits:
        return cls(max_update_bytes=settings.limits.ui_max_update_bytes, max_document_bytes=settings.limits.ui_max_document_bytes,
                   max_items=settings.limits.ui_max_items)


def check_update_size(update: bytes, limits: UiLimits) -> None:
    if len(update) > limits.max_update_bytes:
        raise UiRefused(413, f"UI update is {len(update)} bytes; the limit is {limits.max_update_bytes} "
                             "(GAMMA_UI_MAX_UPDATE_BYTES)")


def check_document_size(size: int, limits: UiLimits) -> None:
    if size > limits.max_document_bytes:
        raise UiRefused(413, f"the UI document would be {size} bytes encoded; the limit is "
                             f"{limits.max_document_bytes} (GAMMA_UI_MAX_DOCUMENT_BYTES)")


def count_values(value: Any) -> tuple[int, int]:
    """(JSON values below the root, deepest nesting); iterative, so any depth is safe to measure."""
    count, deepest = 0, 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            count += 1
            stack.append((child, depth + 1))
    return count, deepest


def _summary(exc: ValidationError) -> tuple[str, list[dict[str, Any]]]:
    errors: list[dict[str, Any]] = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        for e in exc.errors()]
    parts = [f"{'.'.join(e['loc'])}: {e['msg']}" if e["loc"] else str(e["msg"]) for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more, errors


def validate_snapshot(snapshot: Any, limits: UiLimits) -> dict[str, Any]:
    """The snapshot as SessionUIState (ARIs included, shared.contracts.records.ui), within the caps: returns
    the canonical JSON (defaults filled in). Raises UiRefused(422)."""
    if not isinstance(snapshot, dict):
        raise UiRefused(422, "snapshot must be a JSON object (SessionUIState)")
    items, depth = count_values(snapshot)
    if depth > MAX_DEPTH:
        raise UiRefused(422, f"UI state is nested {depth} deep; the limit is {MAX_DEPTH}")
    try:  # a lone surrogate ("\ud800" in JSON) is no UTF-8: pycrdt panics on it when rebuilding the doc
        json.dumps(snapshot, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        raise UiRefused(422, f"UI state holds a string that is not valid Unicode: {exc.reason}") from exc
    except (TypeError, ValueError) as exc:
        raise UiRefused(422, f"UI state is not plain JSON: {exc}") from exc
    if items > limits.max_items:
        raise UiRefused(422, f"UI state holds {items} values; the limit is {limits.max_items} (GAMMA_UI_MAX_ITEMS)")
    try:
        state = SessionUIState.model_validate(_ints(snapshot))
    except ValidationError as exc:
        message, detail = _summary(exc)
        raise UiRefused(422, f"not a valid SessionUIState: {message}", detail) from exc
    dumped = state.model_dump(mode="json", by_alias=True)
    assert isinstance(dumped, dict)
    return dumped


def _ints(value: Any) -> Any:
    """Yjs numbers arrive as floats (3 -> 3.0): integral ones become ints (depth is checked already)."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def default_snapshot() -> dict[str, Any]:
    dumped = SessionUIState().model_dump(mode="json", by_alias=True)
    assert isinstance(dumped, dict)
    return dumped


def repair_snapshot(raw: Any) -> dict[str, Any]:
    """`state.json` as read from disk, made valid: one written before these rules (or by hand) must not
    refuse every later sync. Valid files come back canonical; otherwise each top-level key is kept if
    valid on its own (invalid tabs dropped one by one), else reset to its default, and logged."""
    if not isinstance(raw, dict):
        return default_snapshot()
    try:
        return validate_snapshot(raw, UiLimits(max_items=10**9))
    except UiRefused:
        pass
    kept: dict[str, Any] = {}
    for key in UI_KEYS:
        if key not in raw:
            continue
        value = raw[key]
        if key == "tabs" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if _valid({"tabs": {k: v}})}
        if _valid({key: value}):
            kept[key] = value
    log.warning("ui_state_repaired", dropped=sorted(set(raw) - set(kept)))
    return validate_snapshot(kept, UiLimits(max_items=10**9))


def _valid(partial: dict[str, Any]) -> bool:
    try:
        validate_snapshot(partial, UiLimits(max_items=10**9))
    except UiRefused:
        return False
    return True
