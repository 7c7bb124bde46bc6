"""Every model token counted and priced (docs/costs.md): the usage rows, their price, and the Redis
totals per session and per user that GET /sessions/{id}, GET /spend and the budgets read.

One row per model request the harness sent: the agent's, a subagent's, a compaction summary's, and
each failed or aborted attempt (marked `attempt`). The runtime is the only writer
(services/runtime/runs/spend.py): it adds each row to two hashes, the session's (`keys.spend`, under the
session's hash tag, so erased with it) and the user's (`keys.user_spend`, kept: a deleted session's
spending still counts against its user's cap). Amounts are integer nano-dollars, added with
HINCRBY by one script per hash, so concurrent runs of one user never lose an addition and no
rounding drifts. Model names are hostile strings (any unknown name is accepted at creation): each
hash keeps at most `MAX_MODELS` of them, the rest are summed under `other`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from shared.catalogue import Catalogue
from shared.catalogue.pricing import Pricer, cost_usd
from shared.contracts.records.spend import Spend, Totals, UsageRow
from shared.redis import keys
from shared.redis.redis_wire import text

NANOS = 1_000_000_000  # nano-dollars per dollar
MAX_MODELS = 32  # model names one hash keeps apart; the rest are summed under OTHER
OTHER = "other"
KINDS = ("agent", "subagent", "compaction")
# Hash fields a session's cap overrides live in (POST /sessions `budget`), next to its totals.
CAP_USD_FIELD, CAP_RUN_TOKENS_FIELD = "cap_usd_nanos", "cap_run_tokens"
# Set by the runtime when a dollar cap refused a model call: that call's projected cost, so the proxy
# refuses new prompts (402) while spent + it would still pass the cap; cleared when a call goes.
NEXT_CALL_FIELD = "refused_call_nanos"


def row_nanos(row: UsageRow, pricer: Pricer) -> int | None:
    """The row's cost in nano-dollars; None when the model has no price (shared/catalogue/pricing.py)."""
    price = pricer.price(row.model)
    if price is None:
        return None
    usd = cost_usd(price, row.input_tokens, row.cached_tokens, row.output_tokens, row.cache_write_tokens)
    return round(usd * NANOS)


def family(catalogue: Catalogue, model: str) -> str:
    """A bounded label for the model (its catalogue family; `unknown` for a name it does not know)."""
    return catalogue.resolve(model).family or "unknown"


# KEYS[1]: the hash. ARGV: model, kind, attempt, nanos (-1: unpriced), tokens, max models, other.
# Totals, per kind and per model (a new model name only while fewer than max are kept, else `other`).
_ADD = """
local model = ARGV[1]
if redis.call('HEXISTS', KEYS[1], 'm:' .. model .. ':requests') == 0 then
  if tonumber(redis.call('HGET', KEYS[1], 'models') or '0') >= tonumber(ARGV[6]) then
    model = ARGV[7]
  else
    redis.call('HINCRBY', KEYS[1], 'models', 1)
  end
end
local nanos, tokens = tonumber(ARGV[4]), tonumber(ARGV[5])
for _, p in ipairs({'', 'k:' .. ARGV[2] .. ':', 'm:' .. model .. ':'}) do
  redis.call('HINCRBY', KEYS[1], p .. 'requests', 1)
  redis.call('HINCRBY', KEYS[1], p .. 'tokens', tokens)
  if nanos >= 0 then redis.call('HINCRBY', KEYS[1], p .. 'usd_nanos', nanos)
  else redis.call('HINCRBY', KEYS[1], p .. 'unpriced', 1) end
end
if ARGV[3] ~= 'ok' then redis.call('HINCRBY', KEYS[1], 'a:' .. ARGV[3] .. ':requests', 1) end
return redis.call('HGET', KEYS[1], 'usd_nanos') or '0'
"""


async def add_row(client: aioredis.Redis, sid: str, user: str | None, row: UsageRow, nanos: int | None) -> None:
    """The row added to the session's totals and, when the owner is known, the user's."""
    args: list[str | int] = [row.model, row.kind, row.attempt, -1 if nanos is None else nanos, row.tokens, MAX_MODELS,
                             OTHER]
    add = client.register_script(_ADD)  # EVALSHA: the script's text goes once per connection's server
    await add(keys=[keys.spend(sid)], args=args)
    if user:
        await add(keys=[keys.user_spend(user)], args=args)


def _totals(raw: Mapping[str, str], prefix: str) -> Totals:
    def num(name: str) -> int:
        value = raw.get(prefix + name, "0")
        return int(value) if value.lstrip("-").isdigit() else 0

    return Totals(requests=num("requests"), tokens=num("tokens"), usd=round(num("usd_nanos") / NANOS, 9),
                  unpriced_requests=num("unpriced"))


def spend_of(raw: Mapping[Any, Any]) -> Spend:
    """The Spend read back from one hash (`HGETALL`)."""
    fields = {text(k): text(v) for k, v in raw.items()}
    whole = _totals(fields, "")
    models = sorted({k[2:].rsplit(":", 1)[0] for k in fields if k.startswith("m:") and k.endswith(":requests")})
    spend = Spend(**whole.model_dump(), by_model={m: _totals(fields, f"m:{m}:") for m in models},
                  by_kind={k: _totals(fields, f"k:{k}:") for k in KINDS if f"k:{k}:requests" in fields})
    spend.failed_requests = _totals(fields, "a:failed:").requests
    spend.aborted_requests = _totals(fields, "a:aborted:").requests
    return spend


def usd_nanos(raw: Mapping[Any, Any], field: str = "usd_nanos") -> int:
    value = text(raw.get(field) or raw.get(field.encode()) or "0")
    return int(value) if value.lstrip("-").isdigit() else 0
