"""Every family of the model catalogue priced into usage rows (shared/costs/spend.py): one hand-checked figure
per family for the same usage, so a family added to the catalogue must get its figure here.

The usage: 1,000,000 input tokens, of which 400,000 cached and 100,000 written to the cache, and 200,000
output tokens; its cost is 0.5M·P_in + 0.4M·P_cached + 0.1M·P_write + 0.2M·P_out (reference §5), with
P_write = P_in before GPT-5.6 and 1.25·P_in from 5.6."""

from __future__ import annotations

import pytest

from shared.catalogue import Catalogue
from shared.contracts.records.spend import UsageRow
from shared.costs.spend import NANOS, family, row_nanos
from shared.settings import Settings

CATALOGUE = Catalogue.load()
SETTINGS = Settings(GAMMA_AZURE_DEPLOYMENTS='{"prod-mini": "gpt-5-mini"}',
                    GAMMA_MODEL_PRICES='{"gpt-5.6-sol": {"input": 2, "cachedInput": 0.2, "output": 12}}')
USAGE = {"input_tokens": 1_000_000, "cached_tokens": 400_000, "cache_write_tokens": 100_000, "output_tokens": 200_000}

# family -> (a model of it, its cost in USD for USAGE, worked out by hand from the catalogue's prices)
FIGURES: dict[str, tuple[str, float]] = {
    "gpt-4o": ("gpt-4o", 4.00),  # 0.5·2.5 + 0.4·1.25 + 0.1·2.5 + 0.2·10
    "legacy-text": ("gpt-4", 42.00),  # 0.5·30 + 0.4·30 + 0.1·30 + 0.2·60
    "gpt-4.1": ("gpt-4.1-nano", 0.15),  # 0.5·0.1 + 0.4·0.025 + 0.1·0.1 + 0.2·0.4 (not gpt-4.1's 20x)
    "o1-early": ("o1-preview", 24.00),  # 0.5·15 + 0.4·7.5 + 0.1·15 + 0.2·60
    "o-series": ("o4-mini", 1.65),  # 0.5·1.1 + 0.4·0.275 + 0.1·1.1 + 0.2·4.4
    "o-pro": ("o3-pro", 36.00),  # 0.5·20 + 0.4·20 + 0.1·20 + 0.2·80
    "gpt-5": ("gpt-5-mini-2025-08-07", 0.56),  # a dated snapshot: 0.5·0.25 + 0.4·0.025 + 0.1·0.25 + 0.2·2
    "gpt-5-chat": ("gpt-5.2-chat-latest", 3.92),  # 0.5·1.75 + 0.4·0.175 + 0.1·1.75 + 0.2·14
    "gpt-5-pro": ("gpt-5-pro", 39.00),  # 0.5·15 + 0.4·15 + 0.1·15 + 0.2·120 (not gpt-5's 12x less)
    "codex": ("codex-mini-latest", 2.25),  # 0.5·1.5 + 0.4·0.375 + 0.1·1.5 + 0.2·6
    "gpt-5.1": ("gpt-5.1", 2.80),  # 0.5·1.25 + 0.4·0.125 + 0.1·1.25 + 0.2·10
    "gpt-5.2": ("gpt-5.2", 3.92),  # 0.5·1.75 + 0.4·0.175 + 0.1·1.75 + 0.2·14
    "gpt-5.4": ("gpt-5.4-nano", 0.378),  # 0.5·0.2 + 0.4·0.02 + 0.1·0.2 + 0.2·1.25
    # no list price in the reference: the override's, writes at 1.25x input (the breakpoint regime):
    "gpt-5.6": ("gpt-5.6-sol", 3.73),  # 0.5·2 + 0.4·0.2 + 0.1·2.5 + 0.2·12
}


def test_every_family_of_the_catalogue_has_a_figure() -> None:
    families = {e.family for e in CATALOGUE.entries.values()}
    assert families == set(FIGURES), "a family added to the catalogue needs its hand-checked figure here"


@pytest.mark.parametrize(("fam", "model", "usd"), [(f, m, u) for f, (m, u) in FIGURES.items()])
def test_each_family_is_priced_as_worked_out_by_hand(fam: str, model: str, usd: float) -> None:
    assert family(CATALOGUE, model) == fam
    nanos = row_nanos(UsageRow(model=model, **USAGE), SETTINGS.models.prices)
    assert nanos is not None and nanos / NANOS == pytest.approx(usd, abs=1e-9)


def test_azure_deployments_unknown_models_and_unpriced_families() -> None:
    pricer = SETTINGS.models.prices
    nanos = row_nanos(UsageRow(model="prod-mini", **USAGE), pricer)  # an Azure deployment: its model's price
    assert nanos is not None and nanos / NANOS == pytest.approx(0.56)
    assert family(pricer.catalogue, "prod-mini") == "gpt-5"
    for model in ("gpt-5.6-terra", "gpt-5.5", "llama3", "gpt-4.1-nano-custom"):  # no price, no guess by prefix
        assert row_nanos(UsageRow(model=model, **USAGE), pricer) is None, model
    assert family(CATALOGUE, "llama3") == "unknown"  # a bounded metric label for any name
