"""Runtime injections (docs/integration.md "Injections")."""

from __future__ import annotations

from typing import Literal
from xml.sax.saxutils import quoteattr

from .base import Contract

InjectionKind = Literal[
    "system_note",
    "system_guidance",
    "system_update",
    "client_view",
    "artifact_update",
    "workspace_update",
    "background_result",
]
INJECTION_KINDS: tuple[InjectionKind, ...] = (
    "system_note",
    "system_guidance",
    "system_update",
    "client_view",
    "artifact_update",
    "workspace_update",
    "background_result",
)
Delivery = Literal["steer", "follow_up", "next_turn"]
InjectionSource = Literal["notification", "artifact", "client", "system"]

DELIVERY_BY_KIND: dict[str, Delivery] = {
    "system_note": "next_turn",
    "system_guidance": "steer",
    "system_update": "steer",
    "client_view": "next_turn",
    "artifact_update": "steer",
    "workspace_update": "steer",
    "background_result": "follow_up",
}


class RuntimeInjection(Contract):
    kind: InjectionKind
    content: str


def artifact_update_block(ref: str, from_revision: int | None, to_revision: int, body: str) -> str:
    """The XML-ish injection content the model sees (docs/integration.md "Injections")."""
    attrs = f"ref={quoteattr(ref)}"
    if from_revision is not None:
        attrs += f" from_revision={quoteattr(str(from_revision))}"
    attrs += f" to_revision={quoteattr(str(to_revision))}"
    # File text is user-controlled: it must not be able to close the block and open another tag.
    safe = body.replace("</artifact_update", "&lt;/artifact_update")
    return f"<artifact_update {attrs}>\n{safe}\n</artifact_update>"
