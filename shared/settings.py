"""Configuration from the environment (DESIGN.md "Configuration")."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

LOCAL_USER = "local"
LOCAL_TOKEN = "gamma-local-dev-token"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    redis_url: str = Field("redis://127.0.0.1:6379/0", validation_alias="REDIS_URL")
    data_dir: Path = Field(Path("./data"), validation_alias="GAMMA_DATA_DIR")
    api_tokens: str = Field("", validation_alias="GAMMA_API_TOKENS")
    service_token: str = Field("gamma-local-service-token", validation_alias="GAMMA_SERVICE_TOKEN")

    proxy_port: int = Field(8000, validation_alias="GAMMA_PROXY_PORT")
    notifications_port: int = Field(8001, validation_alias="GAMMA_NOTIFICATIONS_PORT")
    runtime_port: int = Field(8002, validation_alias="GAMMA_RUNTIME_PORT")
    digest_port: int = Field(8003, validation_alias="GAMMA_DIGEST_PORT")
    compaction_port: int = Field(8004, validation_alias="GAMMA_COMPACTION_PORT")
    host: str = Field("127.0.0.1", validation_alias="GAMMA_HOST")

    idle_s: float = Field(300.0, validation_alias="GAMMA_IDLE_S")
    lease_ms: int = Field(10_000, validation_alias="GAMMA_LEASE_MS")
    claim_idle_ms: int = Field(5_000, validation_alias="GAMMA_CLAIM_IDLE_MS")
    max_deliveries: int = Field(5, validation_alias="GAMMA_MAX_DELIVERIES")
    digest_debounce_ms: int = Field(300, validation_alias="GAMMA_DIGEST_DEBOUNCE_MS")
    # A consumer group with waiting entries whose last-delivered id has not moved this long is stalled.
    consumer_stall_s: float = Field(60.0, validation_alias="GAMMA_CONSUMER_STALL_S")
    reply_timeout_s: float = Field(10.0, validation_alias="GAMMA_REPLY_TIMEOUT_S")
    sse_heartbeat_s: float = Field(15.0, validation_alias="GAMMA_SSE_HEARTBEAT_S")

    max_body_bytes: int = Field(2 * 1024 * 1024, validation_alias="GAMMA_MAX_BODY_BYTES")
    max_file_bytes: int = Field(1024 * 1024, validation_alias="GAMMA_MAX_FILE_BYTES")

    # Per-session workspace quota (tool writes, bash, HTTP PUT): bytes and regular files.
    workspace_max_bytes: int = Field(100 * 1024 * 1024, validation_alias="GAMMA_WORKSPACE_MAX_BYTES")
    workspace_max_files: int = Field(2000, validation_alias="GAMMA_WORKSPACE_MAX_FILES")

    # Agent commands (services/runtime/sandbox): auto | bwrap | landlock | off.
    sandbox: str = Field("auto", validation_alias="GAMMA_SANDBOX")
    sandbox_memory_bytes: int = Field(1024 * 1024 * 1024, validation_alias="GAMMA_SANDBOX_MEMORY_BYTES")
    sandbox_cpu_s: int = Field(120, validation_alias="GAMMA_SANDBOX_CPU_S")
    sandbox_max_procs: int = Field(256, validation_alias="GAMMA_SANDBOX_MAX_PROCS")
    sandbox_max_open_files: int = Field(256, validation_alias="GAMMA_SANDBOX_MAX_OPEN_FILES")

    # --- hostile-input limits (issue 23); each area appends its own settings below its own heading.

    openai_api_key: str | None = Field(None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL")
    model: str = Field("gpt-5-mini", validation_alias=AliasChoices("GAMMA_MODEL"))
    context_window: int = Field(128_000, validation_alias="GAMMA_CONTEXT_WINDOW")
    reserve_tokens: int = Field(16_384, validation_alias="GAMMA_RESERVE_TOKENS")
    keep_recent_tokens: int = Field(20_000, validation_alias="GAMMA_KEEP_RECENT_TOKENS")
    # After a failed summary the threshold does not ask again for this many model calls or seconds
    # (whichever ends first; doubled per consecutive failure, up to 8x).
    compaction_retry_calls: int = Field(4, validation_alias="GAMMA_COMPACTION_RETRY_CALLS")
    compaction_retry_s: float = Field(60.0, validation_alias="GAMMA_COMPACTION_RETRY_S")
    # A request unanswered this long no longer counts as in flight (a new one may go out).
    compaction_timeout_s: float = Field(120.0, validation_alias="GAMMA_COMPACTION_TIMEOUT_S")

    instance: str = Field("", validation_alias=AliasChoices("GAMMA_INSTANCE", "HOSTNAME"))

    # --- agent command sandbox (issue 15): size of the private /tmp and HOME of a sandboxed command.
    sandbox_tmp_bytes: int = Field(64 * 1024 * 1024, validation_alias="GAMMA_SANDBOX_TMP_BYTES")

    def tokens(self) -> dict[str, str]:
        """token -> user. With no GAMMA_API_TOKENS set, one local user with a fixed token."""
        if not self.api_tokens.strip():
            return {LOCAL_TOKEN: LOCAL_USER}
        pairs: dict[str, str] = {}
        for item in self.api_tokens.split(","):
            user, _, token = item.strip().partition(":")
            if user and token:
                pairs[token] = user
        return pairs

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    @property
    def scripted(self) -> bool:
        return not self.openai_api_key


def load_settings() -> Settings:
    return Settings()
