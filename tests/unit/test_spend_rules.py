"""The pure rules of spending (docs/costs.md): how a call's attempt is marked, what a call is projected
to cost before it is sent, and which session overrides the operator's ceilings allow."""

from __future__ import annotations

import pytest

from services.proxy.budgets import checked_budget
from services.proxy.edge.errors import ApiError
from services.runtime.model.openai_stream import attempt_of, usage_row
from services.runtime.runs.spend import SpendLedger, reached
from shared.contracts.records.messages import AssistantMessage, Usage
from shared.contracts.records.spend import SessionBudget
from shared.settings import Settings


@pytest.mark.parametrize(("message", "attempt"), [
    (AssistantMessage(stop_reason="stop"), "ok"),
    (AssistantMessage(stop_reason="length"), "ok"),  # an answer cut at the output limit is billed as one
    (AssistantMessage(stop_reason="contentFilter"), "ok"),
    (AssistantMessage(stop_reason="error", error_message="500"), "failed"),
    (AssistantMessage(stop_reason="error", error_kind="empty_reply"), "ok"),  # the harness's verdict on a reply
    (AssistantMessage(stop_reason="aborted"), "aborted"),
])
def test_attempts_are_marked_by_how_the_call_ended(message: AssistantMessage, attempt: str) -> None:
    assert attempt_of(message) == attempt


def test_a_row_carries_the_replys_usage() -> None:
    message = AssistantMessage(model="gpt-5-mini", usage=Usage(input=900, cache_read=800, cache_write=50, output=40,
                                                                reasoning=16, estimated=True))
    row = usage_row(message, "subagent", "aborted")
    assert (row.input_tokens, row.cached_tokens, row.cache_write_tokens, row.output_tokens, row.reasoning_tokens) == (
        900, 800, 50, 40, 16)
    assert row.kind == "subagent" and row.attempt == "aborted" and row.estimated and row.tokens == 940


def test_the_projection_prices_the_shared_prefix_as_cached_and_no_output() -> None:
    ledger = SpendLedger("s1", None, Settings(), None)
    # gpt-5-mini: 0.25 input, 0.025 cached (USD per million): 10,000 tokens of which 8,000 shared
    assert ledger.projected("gpt-5-mini", 10_000, 8_000) == pytest.approx((2_000 * 0.25 + 8_000 * 0.025) / 1e6)
    assert ledger.projected("gpt-5-mini", 100, 5_000) == pytest.approx(100 * 0.025 / 1e6)  # never more cached than sent
    assert ledger.projected("llama3", 10_000, 0) == 0  # unpriced: dollar caps cannot bound it


def test_the_stop_names_the_cap_spent_and_limit() -> None:
    stop = reached("session_usd", 0.4999, 0.5)
    assert (stop.cap, stop.spent, stop.limit) == ("session_usd", 0.4999, 0.5)
    assert "session's spending cap" in stop.message and "$0.4999" in stop.message and "$0.50" in stop.message
    assert "your spending cap" in reached("user_usd", 2, 2).message


@pytest.mark.parametrize(("env", "budget", "field"), [
    ({}, SessionBudget(max_usd=1_000), None),  # no default cap, no ceiling: any cap is lower than none
    ({"GAMMA_SESSION_MAX_USD": 2}, SessionBudget(max_usd=1), None),  # lowering the default
    ({"GAMMA_SESSION_MAX_USD": 2}, SessionBudget(max_usd=3), "budget.max_usd"),  # raising it needs a ceiling
    ({"GAMMA_SESSION_MAX_USD": 2, "GAMMA_SESSION_MAX_USD_CEILING": 5}, SessionBudget(max_usd=5), None),
    ({"GAMMA_SESSION_MAX_USD_CEILING": 5}, SessionBudget(max_usd=5.01), "budget.max_usd"),
    ({}, SessionBudget(run_max_tokens=20_000_000), None),  # GAMMA_RUN_MAX_TOKENS' default
    ({}, SessionBudget(run_max_tokens=20_000_001), "budget.run_max_tokens"),
    ({"GAMMA_RUN_MAX_TOKENS_CEILING": 50_000_000}, SessionBudget(run_max_tokens=50_000_000), None),
])
def test_overrides_stay_within_the_operators_ceilings(env: dict[str, float], budget: SessionBudget,
                                                        field: str | None) -> None:
    settings = Settings(**env)
    if field is None:
        fields = checked_budget(budget, settings)
        assert set(fields) == {"cap_usd_nanos" if budget.max_usd else "cap_run_tokens"}
    else:
        with pytest.raises(ApiError) as refused:
            checked_budget(budget, settings)
        assert refused.value.status == 422 and refused.value.detail["field"] == field
