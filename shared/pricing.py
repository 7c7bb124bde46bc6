"""Model prices (USD per million tokens) for the UI state's cost records (services/runtime/costs.py).

The table is configuration: `GAMMA_MODEL_PRICES` (JSON, model -> {input, cachedInput, output}) is
merged over `DEFAULT_PRICES`, OpenAI's list prices when this table was written. A model is priced by
the longest table key its name starts with, so a dated snapshot (`gpt-5-mini-2025-08-07`) takes its
family's price; a model with no entry gets no amount (its record stays `pending`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import Field, TypeAdapter

from .contracts.base import CamelContract

MAX_MODELS = 100


class ModelPrice(CamelContract):
    input: float = Field(ge=0, le=10_000)
    cached_input: float = Field(ge=0, le=10_000)
    output: float = Field(ge=0, le=10_000)


DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-5": ModelPrice(input=1.25, cached_input=0.125, output=10.0),
    "gpt-5-mini": ModelPrice(input=0.25, cached_input=0.025, output=2.0),
    "gpt-5-nano": ModelPrice(input=0.05, cached_input=0.005, output=0.4),
    "gpt-4.1": ModelPrice(input=2.0, cached_input=0.5, output=8.0),
    "gpt-4.1-mini": ModelPrice(input=0.4, cached_input=0.1, output=1.6),
    "gpt-4o-mini": ModelPrice(input=0.15, cached_input=0.075, output=0.6),
}
_TABLE: TypeAdapter[dict[str, ModelPrice]] = TypeAdapter(dict[str, ModelPrice])


def parse_prices(raw: str) -> dict[str, ModelPrice]:
    """`GAMMA_MODEL_PRICES` over the defaults; raises ValueError on a malformed table."""
    table = dict(DEFAULT_PRICES)
    if raw.strip():
        extra = _TABLE.validate_python(json.loads(raw))
        if len(extra) > MAX_MODELS or any(not k.strip() or len(k) > 200 for k in extra):
            raise ValueError(f"at most {MAX_MODELS} models, each a non-empty name of at most 200 characters")
        table.update(extra)
    return table


def price_of(model: str, prices: Mapping[str, ModelPrice]) -> ModelPrice | None:
    best = max((k for k in prices if model.startswith(k)), key=len, default=None)
    return prices[best] if best is not None else None


def cost_usd(price: ModelPrice, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
    """`input_tokens` includes the cached ones, as the API reports them."""
    fresh = max(input_tokens - cached_tokens, 0)
    return (fresh * price.input + cached_tokens * price.cached_input + output_tokens * price.output) / 1_000_000
