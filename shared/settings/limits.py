"""Settings that bound hostile input (docs/architecture.md "Limits on hostile input")."""

from __future__ import annotations

from pydantic import Field

from shared.settings.area import Area


class LimitSettings(Area):
    """Limits on hostile input: request bodies, UI documents, event streams, transcript pages, session quotas."""

    max_body_bytes: int = Field(2 * 1024 * 1024, validation_alias="GAMMA_MAX_BODY_BYTES",
        description="Largest request body (413).")
    # The JSON depth stays well under pydantic's own parser limit (200), which the runtime
    # meets again when it reads a body wrapped in its inbox entry.
    max_json_depth: int = Field(64, ge=2, le=150, validation_alias="GAMMA_MAX_JSON_DEPTH",
        description="Nesting depth of every JSON body, proxy and notifications (422; at most 150, under pydantic's "
                    "own parser limit).")
    max_json_number_digits: int = Field(100, ge=20, le=4000, validation_alias="GAMMA_MAX_JSON_NUMBER_DIGITS",
        description="Digits per number of every JSON body, proxy and notifications (422).")
    # The UI document cap also bounds the nesting pycrdt's JSON export recurses through
    # (shared/ui/uidoc.py), hence its upper bound.
    ui_max_update_bytes: int = Field(256 * 1024, ge=1024, validation_alias="GAMMA_UI_MAX_UPDATE_BYTES",
        description="Largest Yjs update of a session's UI state, live and dormant alike (413); docs/architecture.md \"Limits on hostile input\".")
    ui_max_document_bytes: int = Field(256 * 1024, ge=1024, le=1024 * 1024,
                                       validation_alias="GAMMA_UI_MAX_DOCUMENT_BYTES",
        description="Largest encoded merged UI document (413); at most 1 MiB, which also bounds the nesting the JSON "
                    "export recurses through.")
    ui_max_items: int = Field(5000, ge=100, validation_alias="GAMMA_UI_MAX_ITEMS",
        description="JSON values in a UI document's snapshot (422).")
    sse_max_streams_per_user: int = Field(16, ge=1, validation_alias="GAMMA_SSE_MAX_STREAMS_PER_USER",
        description="Open event streams per user and proxy process (429 past it).")
    exports_per_user: int = Field(2, ge=1, validation_alias="GAMMA_EXPORTS_PER_USER",
        description="`GET /export` requests of one user in flight per proxy process, until the archive is sent (429 "
                    "with Retry-After past it).")
    exports_per_process: int = Field(4, ge=1, validation_alias="GAMMA_EXPORTS_PER_PROCESS",
        description="`GET /export` requests in flight per proxy process, all users (429 with Retry-After past it).")
    forks_per_user: int = Field(2, ge=1, validation_alias="GAMMA_FORKS_PER_USER",
        description="`POST /fork` requests of one user in flight per proxy process (429 with Retry-After past it).")
    forks_per_process: int = Field(4, ge=1, validation_alias="GAMMA_FORKS_PER_PROCESS",
        description="`POST /fork` requests in flight per proxy process, all users (429 with Retry-After past it).")
    sse_queue_size: int = Field(1000, ge=1, validation_alias="GAMMA_SSE_QUEUE_SIZE",
        description="Events queued for one SSE client before it is closed as too slow (it resumes with "
                    "`Last-Event-ID`).")
    transcript_page_max: int = Field(500, ge=1, validation_alias="GAMMA_TRANSCRIPT_PAGE_MAX",
        description="`GET /transcript` page cap in entries; `limit` above it is a 400.")
    transcript_page_bytes: int = Field(1024 * 1024, ge=1024, validation_alias="GAMMA_TRANSCRIPT_PAGE_BYTES",
        description="`GET /transcript` page cap in bytes (at least one entry).")
    max_sessions_per_user: int = Field(1000, ge=1, validation_alias="GAMMA_MAX_SESSIONS_PER_USER",
        description="Sessions one user may own (403 past it; a deleted session no longer counts).")
    session_creates_per_minute: int = Field(60, ge=1, validation_alias="GAMMA_SESSION_CREATES_PER_MINUTE",
        description="Session creations per user per minute (fixed one-minute windows; 429 with Retry-After past it).")
