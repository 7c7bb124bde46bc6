"""GET /spend: the caller's spending over all their sessions (docs/costs.md). Per-user totals live in
Redis, never in Prometheus labels."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from services.proxy.auth import current_user
from services.proxy.budgets import user_spend
from services.proxy.deps import Proxy, get_proxy
from shared.contracts.records.spend import UserSpend

router = APIRouter(tags=["spend"])


@router.get("/spend", response_model=UserSpend, responses={401: {"description": "missing or unknown token"}})
async def get_spend(user: str = Depends(current_user), proxy: Proxy = Depends(get_proxy)) -> UserSpend:
    return await user_spend(proxy.redis, user, proxy.settings)
