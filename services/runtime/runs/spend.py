"""The session's spending: the one writer of its usage rows, and the budget check before each model
call (docs/costs.md).

`SpendLedger.add` records one model request (the agent's and its subagents' through their
OpenAIStream, compaction summaries when their CompactionReady is handled, failed and aborted attempts
marked as such): priced by the catalogue, added to the session's and the owner's Redis totals
(shared/costs/spend.py) and to the Prometheus counters (shared/costs/spend_metrics.py).

`SpendLedger.preflight` runs before each model call with the request's token count: the projected
cost (the tokens the previous request shared at the cached price, the rest at the input price) added
to what the session and its owner spent must stay within their caps, else the call is not sent and a
`BudgetReachedData` says which cap. A call that crosses a cap is recorded in full; the next
boundary (the next call) stops the run. The per-run token cap is the loop's (engine/reply_rules.py):
this ledger only reads the session's own value of it.
"""

from __future__ import annotations

from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from shared.contracts.records.spend import BudgetLimits, BudgetReachedData, Cap, UsageRow
from shared.costs import spend, spend_metrics
from shared.redis import keys
from shared.redis.redis_wire import text
from shared.settings import Settings

log = structlog.get_logger()
COUNTED_TTL_S = 7 * 24 * 3600  # an inbox entry is long handled (or the session erased) by then


class SpendLedger:
    def __init__(self, sid: str, client: Any, settings: Settings, registry: CollectorRegistry | None) -> None:
        self.sid = sid
        self.client = client
        self.settings = settings
        self.pricer = settings.models.prices
        self.registry = registry
        self.owner: str | None = None
        self.limits = BudgetLimits(session_usd=settings.runtime.session_max_usd or None,
                                   user_usd=settings.runtime.user_max_usd or None,
                                   run_tokens=settings.runtime.run_max_tokens or None)
        self._loaded = False
        self._refused = True  # a refusal of an earlier wake may be recorded: cleared by the first call that goes

    async def load(self) -> BudgetLimits:
        """The owner and the session's own caps (POST /sessions `budget`), read once per wake."""
        if not self._loaded:
            try:
                owner, raw = await self._read()
            except Exception:  # noqa: BLE001 - the settings' caps hold meanwhile; read again at the next call
                log.warning("spend_caps_unread", session_id=self.sid, exc_info=True)
                return self.limits
            self.owner = text(owner) if owner is not None else None
            caps = {text(k): text(v) for k, v in (raw or {}).items()}
            usd, tokens = caps.get(spend.CAP_USD_FIELD, ""), caps.get(spend.CAP_RUN_TOKENS_FIELD, "")
            if usd.isdigit():
                self.limits.session_usd = int(usd) / spend.NANOS
            if tokens.isdigit():
                self.limits.run_tokens = int(tokens)
            self._loaded = True
        return self.limits

    async def _read(self) -> tuple[Any, Any]:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hget(keys.session_row(self.sid), "owner")
            pipe.hmget(keys.spend(self.sid), [spend.CAP_USD_FIELD, spend.CAP_RUN_TOKENS_FIELD])
            owner, caps = await pipe.execute()
        return owner, dict(zip([spend.CAP_USD_FIELD, spend.CAP_RUN_TOKENS_FIELD], caps, strict=True))

    async def add(self, row: UsageRow) -> None:
        """Record one model request. A Redis failure is logged, never the run's failure (the metric
        and the transcript's own usage still have it)."""
        nanos = spend.row_nanos(row, self.pricer)
        if self.registry is not None:
            spend_metrics.record(self.registry, spend.family(self.pricer.catalogue, row.model), row, nanos)
        try:
            await self.load()
            await spend.add_row(self.client, self.sid, self.owner, row, nanos)
        except Exception:  # noqa: BLE001 - counting must not break the run it counts
            log.exception("spend_record_failed", session_id=self.sid, model=row.model, kind=row.kind)

    async def add_once(self, token: str, rows: list[UsageRow]) -> None:
        """Rows that arrive in an inbox entry (a compaction's CompactionReady): recorded once, even
        when the entry is delivered again after a crash before its ack."""
        if rows and await self.client.set(keys.spend_counted(self.sid, token), 1, nx=True, ex=COUNTED_TTL_S):
            for row in rows:
                await self.add(row)

    async def spent(self) -> tuple[float, float]:
        """Dollars the session and its owner spent so far."""
        await self.load()
        session = await self.client.hget(keys.spend(self.sid), "usd_nanos")
        user = await self.client.hget(keys.user_spend(self.owner), "usd_nanos") if self.owner else None
        return (spend.usd_nanos({"usd_nanos": session}) / spend.NANOS,
                spend.usd_nanos({"usd_nanos": user}) / spend.NANOS)

    async def preflight(self, model: str, prompt_tokens: int, cached_tokens: int) -> BudgetReachedData | None:
        """None when the call may go; else the cap it would cross."""
        limits = await self.load()
        if limits.session_usd is None and limits.user_usd is None:
            return None
        projected = self.projected(model, prompt_tokens, cached_tokens)
        session, user = await self.spent()
        for cap, spent_usd, limit in (("session_usd", session, limits.session_usd),
                                      ("user_usd", user, limits.user_usd)):
            if limit is not None and spent_usd + projected > limit:
                # The proxy's 402 reads it: the next prompt would be refused here too (services/proxy/budgets.py).
                await self.client.hset(keys.spend(self.sid), spend.NEXT_CALL_FIELD, round(projected * spend.NANOS))
                self._refused = True
                return reached(cap, spent_usd, limit)  # type: ignore[arg-type]  # one of Cap's values
        if self._refused:
            await self.client.hdel(keys.spend(self.sid), spend.NEXT_CALL_FIELD)
            self._refused = False
        return None

    def projected(self, model: str, prompt_tokens: int, cached_tokens: int) -> float:
        """What sending `prompt_tokens` costs at least (no output counted): 0 for an unpriced model."""
        row = UsageRow(model=model, input_tokens=prompt_tokens, cached_tokens=min(cached_tokens, prompt_tokens))
        nanos = spend.row_nanos(row, self.pricer)
        return (nanos or 0) / spend.NANOS


WHO = {"session_usd": "this session's spending cap", "user_usd": "your spending cap over all sessions",
       "run_tokens": "this run's token cap"}


def reached(cap: Cap, spent: float, limit: float) -> BudgetReachedData:
    """The typed stop: for the `budget_reached` event, the run's error and the 402 body."""
    if cap == "run_tokens":
        amounts = f"{int(spent):,} tokens used of {int(limit):,}"
        after = "Everything so far is kept; send a message to continue with a fresh run."
    else:
        amounts = f"${spent:.4f} spent of ${limit:.2f}"
        after = "Everything so far is kept; new messages are refused until the cap is raised."
    return BudgetReachedData(cap=cap, spent=round(spent, 9), limit=limit,
                             message=f"The run stopped: it reached {WHO[cap]} ({amounts}). {after}")
