"""Runtime injections (docs/integration.md "Injections")."""

from __future__ import annotations

from typing import Literal

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

