"""SessionUIState snapshot (`state.json`): the JSON form of the Yjs document's root map `state`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from shared.ari import parse_ari
from shared.contracts.base import CamelContract

UI_KEYS = (
    "panes",
    "tabs",
    "activeTabByPane",
    "mobile",
    "expandedDirs",
    "recentResources",
    "researchSources",
    "activeForm",
    "callToAction",
    "schemaVersion",
    "costs",
)
SCHEMA_VERSION = 1


class _Ui(CamelContract):
    model_config = ConfigDict(
        extra="allow", alias_generator=CamelContract.model_config.get("alias_generator"), populate_by_name=True,
        serialize_by_alias=True,
    )


class Pane(_Ui):
    id: str
    tab_ids: list[str] = Field(default_factory=list)


class Tab(_Ui):
    id: str
    ari: str
    title: str | None = None

    @field_validator("ari")
    @classmethod
    def _known_ari(cls, value: str) -> str:
        parse_ari(value)  # AriError is a ValueError: a 422 naming the tab (`javascript:` and such)
        return value


class MobileState(_Ui):
    view: Literal["chat", "files"] = "chat"
    file_pane_open: bool = False


class FormField(_Ui):
    id: str
    label: str
    kind: Literal["text", "choice", "multi_choice", "number", "boolean"] = "text"
    options: list[str] = Field(default_factory=list)
    required: bool = False


class ActiveForm(_Ui):
    id: str
    title: str
    fields: list[FormField] = Field(default_factory=list)
    answers: dict[str, Any] = Field(default_factory=dict)
    status: Literal["open", "submitted", "dismissed", "delivered"] = "open"


class CallToAction(_Ui):
    label: str
    action: str


class CostRecord(_Ui):
    id: str
    label: str
    amount: float = 0.0
    status: Literal["pending", "settled"] = "pending"


class SessionUIState(CamelContract):
    """Unknown top-level keys are refused; nested values allow client-added fields."""

    panes: list[Pane] = Field(default_factory=list)
    tabs: dict[str, Tab] = Field(default_factory=dict)
    active_tab_by_pane: dict[str, str] = Field(default_factory=dict)
    mobile: MobileState = Field(default_factory=MobileState)
    expanded_dirs: list[str] = Field(default_factory=list)
    recent_resources: list[str] = Field(default_factory=list)
    research_sources: list[dict[str, Any]] = Field(default_factory=list)
    active_form: ActiveForm | None = None
    call_to_action: CallToAction | None = None
    schema_version: int = SCHEMA_VERSION
    costs: list[CostRecord] = Field(default_factory=list)
