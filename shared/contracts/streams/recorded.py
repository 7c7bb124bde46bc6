"""`gamma:injections:recorded` (runtime -> notifications, digest): an injection is in the transcript."""

from __future__ import annotations

from pydantic import Field

from shared.contracts.base import Contract, new_id
from shared.contracts.records.injection import InjectionSource


class InjectionRecorded(Contract):
    id: str = Field(default_factory=lambda: new_id("ir_"))
    session_id: str
    source: InjectionSource
    source_id: str
    entry_id: str
    ref: str | None = None
    to_revision: int | None = None
