"""`gamma:compaction:requests` (runtime -> compaction group `compaction`)."""

from __future__ import annotations

from pydantic import Field

from shared.contracts.base import Contract, new_id


class CompactionRequest(Contract):
    session_id: str
    request_id: str = Field(default_factory=lambda: new_id("cr_"))
    upto_entry_id: str
    first_kept_entry_id: str
    previous_summary: str | None = None
    previous_details: dict[str, list[str]] | None = None
    custom_instructions: str | None = None
    tokens_before: int = 0
    model: str | None = None
    reserve_tokens: int = 16_384
