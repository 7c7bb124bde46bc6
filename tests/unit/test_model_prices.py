"""Prices from the model catalogue (shared/catalogue/pricing.py): by exact name or dated snapshot, Azure
deployments priced as their model, never by prefix; GAMMA_MODEL_PRICES overrides; cache writes priced
(1.25x input from GPT-5.6 on, reference §5)."""

from __future__ import annotations

import pytest

from shared.catalogue import Catalogue
from shared.catalogue.pricing import Pricer, cost_usd, parse_prices
from shared.settings import Settings

PRICER = Pricer(Catalogue.load())


@pytest.mark.parametrize(("model", "inp", "cached", "out"), [
    ("gpt-4o", 2.50, 1.25, 10.00),  # reference §5 (model page)
    ("gpt-4o-2024-11-20", 2.50, 1.25, 10.00),
    ("gpt-4o-mini", 0.15, 0.075, 0.60),
    ("gpt-4.1", 2.00, 0.50, 8.00),
    ("gpt-4.1-nano", 0.10, 0.025, 0.40),  # not gpt-4.1's (20x)
    ("o3", 2.00, 0.50, 8.00),
    ("o4-mini", 1.10, 0.275, 4.40),  # cached 75% off (reference §5)
    ("gpt-5-mini", 0.25, 0.025, 2.00),  # reference §5 (model page)
    ("gpt-5-mini-2025-08-07", 0.25, 0.025, 2.00),
    ("gpt-5-pro", 15.00, 15.00, 120.00),  # not gpt-5's (12x)
    ("gpt-5.2-codex", 1.75, 0.175, 14.00),
])
def test_each_family_is_priced_by_its_exact_name(model: str, inp: float, cached: float, out: float) -> None:
    price = PRICER.price(model)
    assert price is not None and (price.input, price.cached_input, price.output) == (inp, cached, out)
    assert price.cache_write == inp  # writes cost input before GPT-5.6


def test_no_prefix_guessing_and_unknown_models_stay_unpriced() -> None:
    for model in ("gpt-4.1-nano-custom", "gpt-5-mini-ft", "llama3", "gpt-5.6-sol"):
        assert PRICER.price(model) is None, model


def test_overrides_azure_deployments_and_cache_writes() -> None:
    s = Settings(GAMMA_AZURE_DEPLOYMENTS='{"prod": "gpt-5-mini-2025-08-07"}',
                 GAMMA_MODEL_PRICES='{"gpt-5.6-sol": {"input": 2, "cachedInput": 0.2, "output": 12}, '
                                    '"gpt-4o": {"input": 1, "cachedInput": 0.5, "output": 4, "cacheWrite": 1.5}}')
    pricer = s.models.prices
    assert pricer.price("prod") == PRICER.price("gpt-5-mini")
    sol = pricer.price("gpt-5.6-sol")
    assert sol is not None and sol.cache_write == pytest.approx(2.5)  # 1.25x input (breakpoint regime)
    gpt4o = pricer.price("gpt-4o-2024-08-06")
    assert gpt4o is not None and (gpt4o.input, gpt4o.cache_write) == (1, 1.5)
    # (input - cached - written)·in + cached·cached_in + written·write + output·out, reference §5
    assert cost_usd(sol, 3_000, 2_000, 1_000, 400) == pytest.approx((600 * 2 + 2_000 * 0.2 + 400 * 2.5 + 1_000 * 12) / 1e6)
    assert cost_usd(sol, 3_000, 2_000, 1_000) == pytest.approx((1_000 * 2 + 2_000 * 0.2 + 1_000 * 12) / 1e6)
    for bad in ('{"m": {"input": -1, "cachedInput": 0, "output": 0}}', '{"m": {"input": 1}}', "[1]", "{"):
        with pytest.raises(ValueError):
            parse_prices(bad)


def test_cache_writes_are_read_from_the_usage() -> None:
    from shared.costs.usage import responses_usage as _usage

    raw = {"input_tokens": 3_000, "input_tokens_details": {"cached_tokens": 2_000, "cache_write_tokens": 400},
           "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 3_010}
    usage = _usage(raw)
    assert (usage.input, usage.cache_read, usage.cache_write) == (3_000, 2_000, 400)
