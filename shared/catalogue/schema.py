"""The model catalogue's shape (shared/catalogue/models.yaml), validated once when it is loaded."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Api = Literal["responses", "chat"]
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[Effort, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
CacheRegime = Literal["prefix", "breakpoints"]
# The cache-write price as a multiple of the input price: writes cost nothing extra before GPT-5.6 and
# 1.25x input from GPT-5.6 on (reference §5, prompt-caching guide).
WRITE_MULTIPLIER: dict[CacheRegime, float] = {"prefix": 1.0, "breakpoints": 1.25}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PerApi(_Strict):
    responses: bool = False
    chat: bool = False

    def on(self, api: Api) -> bool:
        return self.responses if api == "responses" else self.chat


class Capabilities(_Strict):
    """What one model accepts (models.yaml's header says what each field means)."""

    apis: tuple[Api, ...] = Field(min_length=1)
    efforts: tuple[Effort, ...] = ()
    default_effort: Effort | None = None  # None: not a reasoning model
    parallel_tool_calls: PerApi = PerApi()
    developer_role: bool = True
    vision: bool = False
    context_window: int | None = Field(None, ge=1024)
    max_output: int | None = Field(None, ge=16)
    cache_regime: CacheRegime = "prefix"
    phase: bool = False
    reasoning_summary: bool = False
    chat_tools_need_effort_none: bool = False

    @property
    def reasons(self) -> bool:
        return self.default_effort is not None

    def effective_effort(self, requested: Effort | None) -> Effort | None:
        """The effort the model reasons at: the one sent, else its default (None: not a reasoning model)."""
        if not self.reasons:
            return None
        return requested if requested is not None else self.default_effort


class Prices(_Strict):
    """USD per million tokens; `cache_write` (a multiple of `input`) defaults by the cache regime."""

    input: float = Field(ge=0, le=10_000)
    cached_input: float = Field(ge=0, le=10_000)
    output: float = Field(ge=0, le=10_000)
    cache_write: float | None = Field(None, ge=0, le=10)


class ModelSpec(_Strict):
    caps: dict[str, object] = Field(default_factory=dict)  # overrides of the family's capabilities
    prices: Prices | None = None
    snapshots: tuple[str, ...] = ()


class Family(_Strict):
    source: str = Field(min_length=1)
    caps: dict[str, object]
    models: dict[str, ModelSpec] = Field(min_length=1)


class CatalogueFile(_Strict):
    unknown: dict[str, object]
    families: dict[str, Family]

    @model_validator(mode="after")
    def _unique(self) -> CatalogueFile:
        seen: set[str] = set()
        for family in self.families.values():
            for name, spec in family.models.items():
                for n in (name, *spec.snapshots):
                    if n in seen:
                        raise ValueError(f"model name {n!r} is listed twice")
                    seen.add(n)
        return self


class Entry(_Strict):
    """One resolved model: its catalogue name (None when unknown), family, capabilities and prices."""

    name: str | None
    family: str | None
    caps: Capabilities
    prices: Prices | None = None
    source: str = ""

    @property
    def known(self) -> bool:
        return self.name is not None

    @property
    def write_multiplier(self) -> float:
        if self.prices is not None and self.prices.cache_write is not None:
            return self.prices.cache_write
        return WRITE_MULTIPLIER[self.caps.cache_regime]
