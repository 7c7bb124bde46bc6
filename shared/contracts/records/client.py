"""PromptClientContext: the browser that submits one prompt (never shared session state)."""

from __future__ import annotations

from pydantic import Field

from shared.contracts.base import CamelContract


class Viewport(CamelContract):
    width: int = Field(ge=0, le=100_000)
    height: int = Field(ge=0, le=100_000)


class VisibleTab(CamelContract):
    tab_id: str = Field(max_length=200)
    pane_id: str = Field(max_length=200)
    ari: str = Field(max_length=2000)
    title: str | None = Field(None, max_length=500)
    location: str | None = Field(None, max_length=500)


class PromptClientContext(CamelContract):
    locale: str = Field("en-US", max_length=35)
    viewport: Viewport | None = None
    pane_capacity: int = Field(1, ge=1, le=16)
    visible_tabs: list[VisibleTab] = Field(default_factory=list, max_length=64)
