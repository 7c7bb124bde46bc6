"""What the proxy does with spending (docs/costs.md): a session's own caps at creation, its spending
in GET /sessions/{id}, and the 402 that refuses a prompt once a dollar cap is reached.

The runtime writes the totals (services/runtime/runs/spend.py); the proxy only reads them, and writes a
session's cap overrides once, with its row. Only the money caps refuse prompts: the token cap is per
run, and a new prompt starts a new run.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from services.proxy.edge.errors import ApiError
from shared.contracts.records.spend import (
    BudgetLimits,
    BudgetReachedData,
    SessionBudget,
    SessionSpend,
    UserSpend,
)
from shared.costs import spend
from shared.redis import keys
from shared.redis.redis_wire import text
from shared.settings import Settings

PAYMENT_REQUIRED = 402


def checked_budget(body: SessionBudget | None, settings: Settings) -> dict[str, str]:
    """The hash fields of a session's own caps; a 422 naming the field when one is above the ceiling
    (nothing is created)."""
    if body is None:
        return {}
    rt = settings.runtime
    out: dict[str, str] = {}
    if body.max_usd is not None:
        ceiling = rt.session_max_usd_ceiling or rt.session_max_usd or None
        if ceiling is not None and body.max_usd > ceiling:
            raise ApiError(422, f"budget.max_usd may be at most {ceiling:g}",
                           {"field": "budget.max_usd", "max": ceiling})
        out[spend.CAP_USD_FIELD] = str(round(body.max_usd * spend.NANOS))
    if body.run_max_tokens is not None:
        limit = rt.run_max_tokens_ceiling or rt.run_max_tokens or None
        if limit is not None and body.run_max_tokens > limit:
            raise ApiError(422, f"budget.run_max_tokens may be at most {limit}",
                           {"field": "budget.run_max_tokens", "max": limit})
        out[spend.CAP_RUN_TOKENS_FIELD] = str(body.run_max_tokens)
    return out


async def caps_of(redis: aioredis.Redis, sid: str) -> dict[str, str]:
    """A session's own caps as stored (a fork keeps its source's)."""
    fields = [spend.CAP_USD_FIELD, spend.CAP_RUN_TOKENS_FIELD]
    values = await redis.hmget(keys.spend(sid), fields)
    return {f: text(v) for f, v in zip(fields, values, strict=True) if v is not None}


async def _read(redis: aioredis.Redis, sid: str, owner: str) -> tuple[dict[str, str], dict[str, str]]:
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.spend(sid))
        pipe.hgetall(keys.user_spend(owner))
        session, user = await pipe.execute()
    return ({text(k): text(v) for k, v in session.items()}, {text(k): text(v) for k, v in user.items()})


def limits_of(raw: dict[str, str], settings: Settings) -> BudgetLimits:
    rt = settings.runtime
    usd, tokens = raw.get(spend.CAP_USD_FIELD, ""), raw.get(spend.CAP_RUN_TOKENS_FIELD, "")
    return BudgetLimits(session_usd=int(usd) / spend.NANOS if usd.isdigit() else (rt.session_max_usd or None),
                        user_usd=rt.user_max_usd or None,
                        run_tokens=int(tokens) if tokens.isdigit() else (rt.run_max_tokens or None))


async def session_spend(redis: aioredis.Redis, sid: str, owner: str, settings: Settings) -> SessionSpend:
    session, user = await _read(redis, sid, owner)
    return SessionSpend(**spend.spend_of(session).model_dump(), user_usd=spend.usd_nanos(user) / spend.NANOS,
                        limits=limits_of(session, settings))


async def user_spend(redis: aioredis.Redis, user: str, settings: Settings) -> UserSpend:
    raw = await redis.hgetall(keys.user_spend(user))
    return UserSpend(**spend.spend_of(raw).model_dump(), user=user, limit_usd=settings.runtime.user_max_usd or None)


async def refuse_over_budget(redis: aioredis.Redis, sid: str, owner: str, settings: Settings) -> None:
    """Before a prompt changes anything: a 402 naming the cap when the session's or its owner's
    spending has reached its dollar cap."""
    session, user = await _read(redis, sid, owner)
    limits = limits_of(session, settings)
    # The model call the runtime last refused for a cap: what the next run would need first.
    need = spend.usd_nanos(session, spend.NEXT_CALL_FIELD) / spend.NANOS
    for cap, raw, limit in (("session_usd", session, limits.session_usd), ("user_usd", user, limits.user_usd)):
        spent = spend.usd_nanos(raw) / spend.NANOS
        if limit is not None and (spent >= limit or spent + need > limit):
            who = "this session's spending cap" if cap == "session_usd" else "your spending cap over all sessions"
            over = "is reached" if spent >= limit else f"would be passed by the next model call (~${need:.4f})"
            reached = BudgetReachedData(cap=cap, spent=round(spent, 9), limit=limit, message=(  # type: ignore[arg-type]
                f"{who} {over}: ${spent:.4f} spent of ${limit:.2f}. The prompt was not sent."))
            raise ApiError(PAYMENT_REQUIRED, reached.message, reached.model_dump())


BUDGET_RESPONSES: dict[int | str, dict[str, Any]] = {
    PAYMENT_REQUIRED: {"description": "a spending cap is reached (`detail`: `{cap, spent, limit, message}`, "
                                      "docs/costs.md); nothing was queued"}}
