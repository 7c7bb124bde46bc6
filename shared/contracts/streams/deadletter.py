"""`gamma:deadletter`: entries no consumer could handle."""

from __future__ import annotations

from pydantic import Field

from shared.contracts.base import Contract, now_ms


class DeadLetter(Contract):
    stream: str
    group: str
    entry_id: str
    fields: dict[str, str]
    error: str
    deliveries: int = 1
    ts: int = Field(default_factory=now_ms)
