"""Model prices (USD per million tokens) for the UI state's cost records (services/runtime/ui/costs.py).

Prices come from the model catalogue (shared/catalogue/models.yaml) by exact name or dated snapshot,
an Azure deployment priced as the model it maps to; never by prefix (gpt-4.1-nano is not gpt-4.1,
gpt-5-pro not gpt-5). `GAMMA_MODEL_PRICES` (JSON, model -> {input, cachedInput, output, cacheWrite?})
overrides the catalogue, looked up the same way. A model with no price gets no amount (its record
stays `pending`).

Cost of one call (reference §5): `(input - cached - cache_write)·P_in + cached·P_cached +
cache_write·P_write + output·P_out`; `P_write` is `P_in` before GPT-5.6 and 1.25·`P_in` from 5.6
(the catalogue's cache regime), unless the table names it.
"""

from __future__ import annotations

import json

from pydantic import Field, TypeAdapter

from shared.catalogue import DATED, Catalogue
from shared.contracts.base import CamelContract

MAX_MODELS = 100


class ModelPrice(CamelContract):
    input: float = Field(ge=0, le=10_000)
    cached_input: float = Field(ge=0, le=10_000)
    output: float = Field(ge=0, le=10_000)
    cache_write: float | None = Field(None, ge=0, le=100_000)  # None: by the model's cache regime


_TABLE: TypeAdapter[dict[str, ModelPrice]] = TypeAdapter(dict[str, ModelPrice])


def parse_prices(raw: str) -> dict[str, ModelPrice]:
    """`GAMMA_MODEL_PRICES`: the overrides only; raises ValueError on a malformed table."""
    if not raw.strip():
        return {}
    table = _TABLE.validate_python(json.loads(raw))
    if len(table) > MAX_MODELS or any(not k.strip() or len(k) > 200 for k in table):
        raise ValueError(f"at most {MAX_MODELS} models, each a non-empty name of at most 200 characters")
    return table


class Pricer:
    """Prices by model name: the overrides first, then the catalogue."""

    def __init__(self, catalogue: Catalogue, overrides: dict[str, ModelPrice] | None = None) -> None:
        self.catalogue = catalogue
        self.overrides = overrides or {}

    def _override(self, model: str) -> ModelPrice | None:
        names = [model, self.catalogue.deployments.get(model, model)]
        if m := DATED.match(names[1]):
            names.append(m["base"])
        return next((self.overrides[n] for n in names if n in self.overrides), None)

    def price(self, model: str) -> ModelPrice | None:
        entry = self.catalogue.resolve(model)
        found = self._override(model)
        if found is None and entry.prices is not None:
            p = entry.prices
            found = ModelPrice(input=p.input, cached_input=p.cached_input, output=p.output)
        if found is None:
            return None
        if found.cache_write is None:
            found = found.model_copy(update={"cache_write": found.input * entry.write_multiplier})
        return found


def cost_usd(price: ModelPrice, input_tokens: int, cached_tokens: int, output_tokens: int,
             cache_write_tokens: int = 0) -> float:
    """`input_tokens` includes the cached and the written ones, as the API reports them (reference §5)."""
    fresh = max(input_tokens - cached_tokens - cache_write_tokens, 0)
    write = price.cache_write if price.cache_write is not None else price.input
    return (fresh * price.input + cached_tokens * price.cached_input + cache_write_tokens * write
            + output_tokens * price.output) / 1_000_000
