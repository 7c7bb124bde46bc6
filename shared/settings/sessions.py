"""Settings of the proxy's session lifecycle (docs/architecture.md "Session lifecycle")."""

from __future__ import annotations

from pydantic import Field

from shared.settings.area import Area


class SessionSettings(Area):
    """The proxy's session lifecycle: forwarded writes, SSE heartbeats, idempotency keys, deletes and exports."""

    reply_timeout_s: float = Field(10.0, validation_alias="GAMMA_REPLY_TIMEOUT_S",
        description="How long the proxy waits for the runtime's answer to a forwarded write (seconds).")
    sse_heartbeat_s: float = Field(15.0, validation_alias="GAMMA_SSE_HEARTBEAT_S",
        description="Seconds between SSE heartbeats.")
    idempotency_ttl_s: int = Field(24 * 3600, ge=60, le=7 * 24 * 3600, validation_alias="GAMMA_IDEMPOTENCY_TTL_S",
        description="`Idempotency-Key`: how long a stored response is replayed (seconds; docs/architecture.md "
                    "\"Session lifecycle\").")
    idempotency_max_keys: int = Field(10_000, ge=10, le=1_000_000, validation_alias="GAMMA_IDEMPOTENCY_MAX_KEYS",
        description="`Idempotency-Key`: keys kept per user (the oldest go first).")
    idempotency_lease_s: int = Field(120, ge=5, le=3600, validation_alias="GAMMA_IDEMPOTENCY_LEASE_S",
        description="`Idempotency-Key`: how long a request in flight holds its key (a killed proxy's key frees itself"
                    " then).")
    idempotency_max_response_bytes: int = Field(256 * 1024, ge=1024, le=16 * 1024 * 1024,
                                                validation_alias="GAMMA_IDEMPOTENCY_MAX_RESPONSE_BYTES",
        description="`Idempotency-Key`: a response bigger than this is not stored.")
    deleted_retention_s: int = Field(30 * 24 * 3600, ge=60, validation_alias="GAMMA_DELETED_RETENTION_S",
        description="How long a deleted session's id is remembered (later writes and notifications: 404/410; "
                    "seconds).")
    delete_sweep_interval_s: float = Field(30.0, gt=0, le=3600, validation_alias="GAMMA_DELETE_SWEEP_INTERVAL_S",
        description="How often each proxy resumes deletes a killed proxy left half done (seconds).")
    delete_final_pass_s: float = Field(60.0, ge=1, le=3600, validation_alias="GAMMA_DELETE_FINAL_PASS_S",
        description="How long after a delete its final pass erases once more what a message already on its way"
                    " wrote meanwhile (seconds; longer than a message's way through the streams).")
    export_max_bytes: int = Field(512 * 1024 * 1024, ge=1024, validation_alias="GAMMA_EXPORT_MAX_BYTES",
        description="`GET /sessions/{id}/export` refuses (413) a session whose files add up to more.")
