"""The scripted model's own settings (GAMMA_SCRIPTED_*, GAMMA_COMPACTION_SCRIPTED_*): knobs of the test
double, read here and never by the services (scripted/README.md lists them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from scripted.strict import Strictness


class ScriptedSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    profile: Literal["instant", "fast_gpt"] = Field(
        "instant", validation_alias="GAMMA_SCRIPTED_PROFILE",
        description="The scripted model's timing: `instant` (every chunk at once, 64 characters each) or "
                    "`fast_gpt` (400 ms to the first token, 80 tokens/s, 3 ms jitter); the three settings "
                    "below override the profile's numbers when set. With a rate, every chunk carries one token.")
    ttft_ms: float | None = Field(None, ge=0, le=60_000, validation_alias="GAMMA_SCRIPTED_TTFT_MS",
                                  description="Time to the first token (ms).")
    tokens_per_s: float | None = Field(None, ge=0, le=100_000, validation_alias="GAMMA_SCRIPTED_TOKENS_PER_S",
                                       description="Tokens per second after the first.")
    jitter_ms: float | None = Field(None, ge=0, le=10_000, validation_alias="GAMMA_SCRIPTED_JITTER_MS",
                                    description="Uniform jitter of each token's send time (ms).")
    stamp: bool = Field(False, validation_alias="GAMMA_SCRIPTED_STAMP",
                        description="Bench only: `@ts@` in a streamed chunk becomes its emit time (time.time(), "
                                    "6 decimals), so a client can measure what the harness adds between the "
                                    "model's chunk and its screen.")
    server_port: int = Field(0, ge=0, le=65535, validation_alias="GAMMA_SCRIPTED_SERVER_PORT",
                             description="`make run` without OPENAI_API_KEY: serve the scripted model from its own "
                                         "process on this port (scripted/server.py), reached by the runtime "
                                         "workers as a provider (OPENAI_BASE_URL); 0 = inside each runtime.")
    strict: str = Field(
        "on", validation_alias="GAMMA_SCRIPTED_STRICT",
        description="The model-API double's rules (scripted/strict/): `on` (every group), `off` (none), a "
                    "comma-separated list of groups to enforce, or `-group` entries to drop from all. Groups: "
                    "`reasoning`, `params`, `context`, `roles`, `pairing`, `models`, `sdk` (scripted/README.md "
                    "\"Strictness\").")
    encrypted_by_default: bool = Field(
        False, validation_alias="GAMMA_SCRIPTED_ENCRYPTED_BY_DEFAULT",
        description="Reasoning items carry `encrypted_content` even when `include` does not ask for it (the "
                    "newer API default, reference §1.3); off: the legacy rule, only when asked.")
    compaction_delay_s: float = Field(0.0, ge=0, validation_alias="GAMMA_COMPACTION_SCRIPTED_DELAY_S",
                                      description="The scripted summarizer's latency per call (fault tests, "
                                                  "bench-compaction).")
    compaction_failures: int = Field(0, ge=0, validation_alias="GAMMA_COMPACTION_SCRIPTED_FAILURES",
                                     description="The scripted summarizer's first this many calls answer 503.")

    @field_validator("strict")
    @classmethod
    def _groups(cls, value: str) -> str:
        from scripted.strict import Strictness

        Strictness.parse(value)  # unknown groups fail at start, not on the first request
        return value

    def strictness(self) -> Strictness:
        from scripted.strict import Strictness

        return Strictness.parse(self.strict, self.encrypted_by_default)


if __name__ == "__main__":  # `make docs`: scripted/README.md's settings table
    from pathlib import Path

    from tools.settings_table import update

    update(Path(__file__).with_name("README.md"), "scripted-settings", ScriptedSettings)
