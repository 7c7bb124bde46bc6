"""Settings of context compaction (services/runtime/runs/compactor.py)."""

from __future__ import annotations

from pydantic import Field

from shared.settings.area import Area


class CompactionSettings(Area):
    """When a session's context is compacted, what it keeps, and the back-off after a failed summary."""

    context_window: int = Field(128_000, validation_alias="GAMMA_CONTEXT_WINDOW",
        description="The model's context window (tokens): the compaction threshold is this minus "
                    "`GAMMA_RESERVE_TOKENS`.")
    reserve_tokens: int = Field(16_384, validation_alias="GAMMA_RESERVE_TOKENS",
        description="Tokens kept free for the reply and the summary: compaction starts past the window minus these.")
    keep_recent_tokens: int = Field(20_000, validation_alias="GAMMA_KEEP_RECENT_TOKENS",
        description="Tokens of recent conversation a compaction keeps verbatim (where it cuts).")
    compaction_retry_calls: int = Field(4, validation_alias="GAMMA_COMPACTION_RETRY_CALLS",
        description="After a failed summary the threshold does not ask again for this many model calls (doubled per "
                    "consecutive failure, up to 8x).")
    compaction_retry_s: float = Field(60.0, validation_alias="GAMMA_COMPACTION_RETRY_S",
        description="After a failed summary the threshold does not ask again for this many seconds or "
                    "`GAMMA_COMPACTION_RETRY_CALLS` model calls, whichever ends first (doubled per consecutive "
                    "failure, up to 8x).")
    compaction_timeout_s: float = Field(120.0, validation_alias="GAMMA_COMPACTION_TIMEOUT_S",
        description="A compaction request unanswered this long no longer counts as in flight (a new one may go out).")
    compaction_summary_images: int = Field(4, ge=0, le=16, validation_alias="GAMMA_COMPACTION_SUMMARY_IMAGES",
        description="The most recent images of the messages a compaction summarizes that go to the summarizer as "
                    "image parts (`detail: low`), so the summary can say what they showed; the rest are named only.")
