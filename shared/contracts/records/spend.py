"""Spending (docs/costs.md): one usage row per model request, the totals GET /sessions/{id} and
GET /spend report, a session's own budget at creation, and the `budget_reached` event."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.contracts.base import Contract

Kind = Literal["agent", "subagent", "compaction"]
Attempt = Literal["ok", "failed", "aborted"]
Cap = Literal["session_usd", "user_usd", "run_tokens"]
MAX_USD = 1_000_000.0  # the largest cap a body may name (the settings' bound too)


class UsageRow(Contract):
    """One model request's usage as the API reported it (or, `estimated`, as the harness counted it
    when the attempt ended before the API said)."""

    model: str = Field(max_length=200)
    kind: Kind = "agent"
    attempt: Attempt = "ok"
    input_tokens: int = Field(0, ge=0)  # includes cached_tokens and cache_write_tokens (reference §5)
    cached_tokens: int = Field(0, ge=0)
    cache_write_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)  # includes reasoning_tokens
    reasoning_tokens: int = Field(0, ge=0)
    estimated: bool = False

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Totals(Contract):
    requests: int = 0
    tokens: int = 0  # input plus output
    usd: float = 0.0
    unpriced_requests: int = 0  # requests of a model with no price: their tokens are counted, not their cost


class Spend(Totals):
    """A session's or a user's spending: every model request (agent, subagents, compaction, failed and
    aborted attempts), in total, per model and per kind."""

    by_model: dict[str, Totals] = Field(default_factory=dict)
    by_kind: dict[str, Totals] = Field(default_factory=dict)
    failed_requests: int = 0
    aborted_requests: int = 0


class SessionBudget(Contract):
    """`POST /sessions` `budget`: this session's own caps, within the operator's ceilings
    (GAMMA_SESSION_MAX_USD_CEILING, GAMMA_RUN_MAX_TOKENS_CEILING); unset: the defaults."""

    max_usd: float | None = Field(None, gt=0, le=MAX_USD, allow_inf_nan=False)
    run_max_tokens: int | None = Field(None, ge=1, le=10_000_000_000)


class BudgetLimits(Contract):
    """The caps that apply (None: no cap)."""

    session_usd: float | None = None
    user_usd: float | None = None
    run_tokens: int | None = None


class SessionSpend(Spend):
    """GET /sessions/{id} `spend`: the session's spending, its owner's total and the caps that apply."""

    user_usd: float = 0.0
    limits: BudgetLimits = Field(default_factory=BudgetLimits)


class UserSpend(Spend):
    """GET /spend: the caller's spending over all their sessions (deleted ones too)."""

    user: str
    limit_usd: float | None = None


class BudgetReachedData(Contract):
    """`budget_reached` event (and the 402 body's `detail`): which cap stopped the run or refused the
    prompt, what was spent and the limit (dollars, or tokens for `run_tokens`)."""

    cap: Cap
    spent: float
    limit: float
    message: str
