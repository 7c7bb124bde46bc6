"""`gamma:runtime:wake` (proxy -> runtime group `runtime`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.contracts.base import Contract, new_id


class Wake(Contract):
    session_id: str
    wake_id: str = Field(default_factory=lambda: new_id("w_"))
    reason: Literal["message", "resume", "compaction", "notification"] = "message"
