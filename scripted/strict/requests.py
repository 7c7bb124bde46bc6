"""A request checked against the real API's rules (rules.py's table), once per request: the first
refusal in the real API's shape, or None."""

from __future__ import annotations

from typing import Any

from ..responses import foreign_reasoning
from ..types import ScriptedError
from . import Strictness


def check(api: str, body: dict[str, Any], strict: Strictness) -> ScriptedError | None:
    if api == "responses" and (foreign := foreign_reasoning(body)) is not None:
        # reference §1.4/§1.8: encrypted reasoning is bound to its issuer (checked by the lenient double too)
        return ScriptedError(400, "invalid_encrypted_content",
                             f"The encrypted content for item {foreign} could not be verified.")
    return None
