"""The HTTP side of SessionUIState: strict base64, Yjs decode checks (400), snapshot validation (422).

The document shape and the deterministic rebuild from `state.json` live in `shared.uidoc`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pycrdt import Doc
from pydantic import ValidationError

from shared.contracts.ui import SessionUIState
from shared.uidoc import normalize

from .ari import AriError, parse_ari
from .errors import ApiError, validation_summary


def decode_b64(text: str) -> bytes:
    """Strict base64 (standard alphabet, padding optional): anything else is a 400."""
    cleaned = "".join(text.split())
    try:
        return base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, f"update is not valid base64: {exc}") from exc


def encode_b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def apply_update(doc: Doc, update: bytes) -> None:
    """Apply a V1 update; undecodable or unintegrable bytes are a 400."""
    if not update:
        raise ApiError(400, "update is empty; an empty Yjs update is the two bytes 0x00 0x00")
    try:
        doc.apply_update(update)
    except (ValueError, RuntimeError) as exc:
        raise ApiError(400, f"update is not a valid Yjs V1 update: {exc}") from exc
    except BaseException as exc:  # pyo3 PanicException derives from BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
            raise
        raise ApiError(400, f"update could not be decoded: {type(exc).__name__}") from exc


def check_update(update: bytes) -> None:
    """Decode-check an incremental update without any stored state (live path, before forwarding)."""
    apply_update(Doc(), update)


def full_update(doc: Doc) -> bytes:
    return doc.get_update()


def validate_snapshot(snapshot: Any) -> dict[str, Any]:
    """SessionUIState (422 on mismatch, tab ARIs included) -> the canonical JSON stored in state.json."""
    if not isinstance(snapshot, dict):
        raise ApiError(422, "snapshot must be a JSON object (SessionUIState)")
    try:
        state = SessionUIState.model_validate(normalize(snapshot))
    except ValidationError as exc:
        message, detail = validation_summary(list(exc.errors()))
        raise ApiError(422, "snapshot is not a valid SessionUIState: " + message.removeprefix("invalid request: "), detail) from exc
    for tab_id, tab in state.tabs.items():
        try:
            parse_ari(tab.ari)
        except AriError as exc:
            raise ApiError(422, f"snapshot tab {tab_id!r} has an invalid ARI: {exc}") from exc
    dumped = state.model_dump(mode="json", by_alias=True)
    assert isinstance(dumped, dict)
    return dumped


def default_snapshot() -> dict[str, Any]:
    dumped = SessionUIState().model_dump(mode="json", by_alias=True)
    assert isinstance(dumped, dict)
    return dumped
