"""The HTTP side of SessionUIState: strict base64 (400), and the shared rule's refusals as ApiErrors.

The document shape, the rule and the merge live in `shared.ui.uidoc`, `shared.ui.uirules`, `shared.ui.uimerge`:
the runtime applies the same ones while the session is live.
"""

from __future__ import annotations

import base64
from typing import Any

from services.proxy.edge.errors import ApiError
from shared.ui.uirules import UiLimits, UiRefused
from shared.ui.uirules import default_snapshot as default_snapshot
from shared.ui.uirules import validate_snapshot as _validate
from shared.ui.write_model import Refused, decode_update


def decode_b64(text: str) -> bytes:
    """Strict base64 (standard alphabet, padding optional): anything else is a 400."""
    update = decode_update(text)
    if isinstance(update, Refused):
        raise ApiError(update.status, update.message)
    return update


def encode_b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def api_error(exc: UiRefused) -> ApiError:
    return ApiError(exc.status, exc.message, exc.detail)


def validate_snapshot(snapshot: Any, limits: UiLimits) -> dict[str, Any]:
    """SessionUIState (422 on mismatch, tab ARIs included) -> the canonical JSON stored in state.json."""
    try:
        return _validate(snapshot, limits)
    except UiRefused as exc:
        raise api_error(exc) from exc
