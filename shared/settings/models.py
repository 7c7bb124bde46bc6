"""Settings of the model server and the model APIs (README "Models"; docs/architecture.md "Trust boundaries")."""

from __future__ import annotations

import fnmatch
from typing import Literal

from pydantic import AliasChoices, Field, field_validator

from shared.catalogue import Catalogue, catalogue, parse_deployments, parse_extra
from shared.catalogue.pricing import Pricer, parse_prices
from shared.settings.area import Area


class ModelServerSettings(Area):
    """The model server, the model API of new sessions, retries, the trusted role and prices."""

    openai_api_key: str | None = Field(None, validation_alias=AliasChoices("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY"),
        description="The model server's key; unset: no model unless `GAMMA_MODEL_FACTORY` names one (the launchers "
                    "wire the scripted model's).")
    openai_base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL",
        description="Any OpenAI-compatible server; unset: OpenAI.")
    # Azure OpenAI (reference §7.1; docs/models.md "Azure"): the resource's endpoint and, for the
    # legacy data plane, its api-version; the `model` of a request is a deployment name there.
    azure_endpoint: str | None = Field(None, max_length=500, validation_alias="AZURE_OPENAI_ENDPOINT",
        description="An Azure OpenAI resource (`https://RESOURCE.openai.azure.com`): with `OPENAI_API_VERSION`, the "
                    "`AsyncAzureOpenAI` client (deployments paths, `api-version`); without, the v1 API at "
                    "`{endpoint}/openai/v1/`. The key is `OPENAI_API_KEY` or `AZURE_OPENAI_API_KEY`.")
    azure_api_version: str | None = Field(None, max_length=40, validation_alias="OPENAI_API_VERSION",
        description="The Azure `api-version` of the legacy data plane (e.g. `2025-04-01-preview`); unset: the v1 API.")
    azure_deployments: str = Field("", max_length=20_000, validation_alias="GAMMA_AZURE_DEPLOYMENTS",
        description="JSON `{deployment: model}`: the catalogue model each Azure deployment name serves (its "
                    "parameters, roles and prices come from that model's entry; an unmapped deployment is an "
                    "unknown model).")
    model_catalogue_extra: str = Field("", max_length=100_000, validation_alias="GAMMA_MODEL_CATALOGUE_EXTRA",
        description="JSON `{model: {like?, caps?, prices?}}` added over the model catalogue "
                    "(`shared/catalogue/models.yaml`): a model `like` a known one, with capability overrides; "
                    "without `like`, over the unknown-model default (docs/models.md).")
    model: str = Field("gpt-5-mini", validation_alias=AliasChoices("GAMMA_MODEL"),
        description="The model of new sessions (the request's `model` wins).")
    model_api: Literal["responses", "chat"] | None = Field(None, validation_alias="GAMMA_MODEL_API",
        description="The model API of new sessions (`responses` or `chat`); unset: `responses` for OpenAI itself (no "
                    "`OPENAI_BASE_URL`, or api.openai.com), `chat` otherwise. A session keeps the one it was created "
                    "with (`model.api` on `POST /sessions` overrides).")
    max_output_tokens: int = Field(32_000, ge=16, le=1_000_000, validation_alias="GAMMA_MAX_OUTPUT_TOKENS",
        description="The output cap of a model call (`max_output_tokens` on Responses, `max_completion_tokens` on "
                    "Chat), lowered to the model's own maximum (the catalogue); a reply cut there is continued once, "
                    "then an error.")
    # docs/cache.md "The prompt_cache_key policy" (reference openai-api-rules.md §6).
    prompt_cache_key: Literal["shared", "session"] = Field("shared", validation_alias="GAMMA_PROMPT_CACHE_KEY",
        description="The `prompt_cache_key` of model calls: `shared` (the sessions of a variant share one of "
                    "`GAMMA_PROMPT_CACHE_KEY_SHARDS` keys, picked by session id: a new session lands where the "
                    "prefix is cached, and a session keeps its key) or `session` (the session id: reuse within a "
                    "session only). docs/cache.md.")
    prompt_cache_key_shards: int = Field(16, ge=1, le=4096, validation_alias="GAMMA_PROMPT_CACHE_KEY_SHARDS",
        description="Keys per variant under the `shared` policy. OpenAI spreads a prefix+key pair over more "
                    "machines above ~15 requests a minute: set about (model calls a minute across sessions) / 15.")
    model_max_retries: int = Field(4, ge=0, le=20, validation_alias="GAMMA_MODEL_MAX_RETRIES",
        description="Retries of a model call on transient failures (408/409/5xx, a rate limit, a cut or idle stream; "
                    "not quota, billing or other 4xx: docs/architecture.md \"Model calls: retries and recovery\"); "
                    "then an `error` event and the run ends.")
    model_retry_base_s: float = Field(1.0, ge=0.0, le=60.0, validation_alias="GAMMA_MODEL_RETRY_BASE_S",
        description="The backoff base of model call retries (seconds).")
    model_retry_max_s: float = Field(60.0, ge=0.0, le=600.0, validation_alias="GAMMA_MODEL_RETRY_MAX_S",
        description="The cap of one backoff wait between model call retries (seconds); a server that asks for a "
                    "longer wait (Retry-After, \"try again in\") is not retried.")
    # Retries that scale (docs/architecture.md "Model calls: retries and recovery"; reference note §4).
    model_retry_jitter: float = Field(0.25, ge=0.0, le=1.0, validation_alias="GAMMA_MODEL_RETRY_JITTER",
        description="The random fraction added to every retry wait, the server's own included, so sessions that "
                    "got the same rate limit do not retry in lockstep.")
    model_call_deadline_s: float = Field(900.0, ge=0.0, le=86_400.0, validation_alias="GAMMA_MODEL_CALL_DEADLINE_S",
        description="The overall deadline of one model call: all its attempts and waits (seconds; 0: none). A retry "
                    "that would end past it is not made.")
    model_stream_idle_s: float = Field(300.0, ge=0.0, le=3600.0, validation_alias="GAMMA_MODEL_STREAM_IDLE_S",
        description="A model stream that sends no bytes for this long (headers included) is dropped and retried "
                    "like a cut stream (seconds; 0: only the client's read timeout).")
    model_breaker_threshold: int = Field(5, ge=0, le=1000, validation_alias="GAMMA_MODEL_BREAKER_THRESHOLD",
        description="Provider failures in a row (5xx, connection, idle stream) after which a runtime worker's calls "
                    "to that provider fail at once for the cool-down (circuit breaker; 0: never).")
    model_breaker_cooldown_s: float = Field(30.0, ge=0.0, le=3600.0, validation_alias="GAMMA_MODEL_BREAKER_COOLDOWN_S",
        description="How long an open circuit breaker fails calls before one trial call goes through (seconds).")
    model_max_concurrent: int = Field(0, ge=0, le=100_000, validation_alias="GAMMA_MODEL_MAX_CONCURRENT",
        description="Model calls a runtime worker makes at once to one provider (0: no bound); the others wait.")
    # The openai client's HTTP backend for a real endpoint (OPENAI_API_KEY set). `aiohttp` (the SDK's
    # DefaultAioHttpClient): its C parser reads a token-per-chunk stream at ~60% of httpx/h11's CPU,
    # and returns what a connection buffered in one read, which the runtime's read gate needs
    # (model/sse.py); with `httpx` the streams are read chunk by chunk, ungated (bench/stream_micro.py).
    model_http: Literal["aiohttp", "httpx"] = Field("aiohttp", validation_alias="GAMMA_MODEL_HTTP",
        description="The `openai` client's HTTP backend for a real endpoint: `aiohttp` "
                    "(`openai.DefaultAioHttpClient`: ~40% less CPU per streamed token than httpx's own, and reads "
                    "gated per tick) or `httpx`.")
    model_max_connections: int = Field(4096, ge=1, le=100_000, validation_alias="GAMMA_MODEL_MAX_CONNECTIONS",
        description="Connections (all kept alive) of a runtime worker's model client: one per streaming session.")
    # Where the runtime and the compaction service get their model client (shared/serving/model.py
    # `model_client`): `module:function`, a ModelFactory; empty = the OpenAI client (OPENAI_API_KEY).
    # The dev/test launchers (services/stack.py, tests/support/stack.py) name the scripted model's.
    model_factory: str = Field("", max_length=200, pattern=r"^([\w.]+:\w+)?$", validation_alias="GAMMA_MODEL_FACTORY",
        description="Where the runtime and compaction get their model client (`shared/serving/model.py`): `module:function` "
                    "of a ModelFactory; empty: the OpenAI client. `make run`, the tests and compose name "
                    "`scripted.factory:model_factory` (README \"Models\").")
    # Trusted transport (docs/architecture.md "Trust boundaries"): the role the harness's injections
    # and anchors are sent with. `developer`: a channel user text cannot imitate; `user`: for servers or
    # models that reject the developer role (reserved tags in user text and tool output are neutralised
    # either way). Unset: `developer` for OpenAI itself and every Responses session, `user` for Chat
    # Completions on another server (many chat templates know only system/user/assistant/tool).
    trusted_role: Literal["developer", "user"] | None = Field(None, validation_alias="GAMMA_TRUSTED_ROLE",
        description="The role the harness's injections and anchors are sent with (`developer` or `user`; docs/security.md "
                    "\"Trusted transport\").")
    trusted_role_user_models: str = Field("", max_length=4096, validation_alias="GAMMA_TRUSTED_ROLE_USER_MODELS",
        description="Comma-separated `fnmatch` patterns of model names whose sessions use the `user` role whatever "
                    "`GAMMA_TRUSTED_ROLE` says (models or servers that reject `developer`).")

    model_prices: str = Field("", validation_alias="GAMMA_MODEL_PRICES",
        description="JSON `{model: {input, cachedInput, output, cacheWrite?}}` in USD per million tokens, over the "
                    "model catalogue's prices (exact name or dated snapshot; docs/models.md \"Prices\"); prices the UI "
                    "state's cost records (one per model, from the transcript's recorded usage, rebuilt after each run "
                    "and at a wake).")

    @field_validator("model_prices")
    @classmethod
    def _prices(cls, value: str) -> str:
        parse_prices(value)  # a malformed table fails at start
        return value

    @field_validator("model_catalogue_extra")
    @classmethod
    def _extra(cls, value: str) -> str:
        parse_extra(value)
        Catalogue.load(value)  # a `like` the catalogue does not know fails at start too
        return value

    @field_validator("azure_deployments")
    @classmethod
    def _deployments(cls, value: str) -> str:
        parse_deployments(value)
        return value

    @property
    def catalogue(self) -> Catalogue:
        return catalogue(self.model_catalogue_extra, self.azure_deployments)

    @property
    def prices(self) -> Pricer:
        return Pricer(self.catalogue, parse_prices(self.model_prices))

    @property
    def openai_endpoint(self) -> bool:
        """OpenAI itself (or a model factory's client that plays it, offline), not another compatible server."""
        base = (self.openai_base_url or "").strip()
        return not self.azure_endpoint and (not base or "://api.openai.com" in base)

    @property
    def default_model_api(self) -> Literal["responses", "chat"]:
        if self.model_api is not None:
            return self.model_api
        return "responses" if self.openai_endpoint else "chat"

    def trusted_role_for(self, model: str, api: Literal["responses", "chat"]) -> Literal["developer", "user"]:
        """The role of a session's trusted messages: a model that takes no developer role (the
        catalogue) or is listed for user-role transport first, then GAMMA_TRUSTED_ROLE, then the API's
        default (see the field)."""
        patterns = [p.strip() for p in self.trusted_role_user_models.split(",") if p.strip()]
        if any(fnmatch.fnmatchcase(model, p) for p in patterns) or not self.catalogue.resolve(model).caps.developer_role:
            return "user"
        if self.trusted_role is not None:
            return self.trusted_role
        return "developer" if api == "responses" or self.openai_endpoint else "user"
