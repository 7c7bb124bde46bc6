"""Runtime injections (docs/integration.md "Injections")."""

from __future__ import annotations

from typing import Literal

from shared.contracts.base import Contract

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
InjectionSource = Literal["notification", "artifact", "client", "system"]


class RuntimeInjection(Contract):
    kind: InjectionKind
    content: str

