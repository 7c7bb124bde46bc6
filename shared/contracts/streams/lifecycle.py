"""`gamma:lifecycle` (runtime -> notifications, digest)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from shared.contracts.base import Contract, new_id


class SessionLive(Contract):
    type: Literal["session_live"] = "session_live"
    id: str = Field(default_factory=lambda: new_id("l_"))
    session_id: str
    wake_id: str
    fence: int
    worker_id: str


class SessionDormant(Contract):
    type: Literal["session_dormant"] = "session_dormant"
    id: str = Field(default_factory=lambda: new_id("l_"))
    session_id: str
    fence: int
    reason: str = "idle"


LifecycleEvent = Annotated[SessionLive | SessionDormant, Field(discriminator="type")]
LIFECYCLE_ADAPTER: TypeAdapter[LifecycleEvent] = TypeAdapter(LifecycleEvent)
