"""The Redis totals of shared/costs/spend.py on a real Redis: additions from concurrent runs are never lost
(one script per hash, integer nano-dollars), hostile model names (Unicode, colons, many of them) keep the
hash bounded, and the session's and the user's hashes read back as the API shows them."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from shared.contracts.records.spend import UsageRow
from shared.costs.spend import MAX_MODELS, NANOS, OTHER, add_row, spend_of
from shared.redis import keys


async def test_concurrent_rows_add_up_exactly(redis_client: aioredis.Redis) -> None:
    rows = [UsageRow(model="gpt-5-mini", kind=("agent", "subagent", "compaction")[i % 3],
                     attempt=("ok", "failed", "aborted")[i % 3], input_tokens=1000 + i, output_tokens=7)
            for i in range(60)]
    await asyncio.gather(*(add_row(redis_client, f"s{i % 2}", "carol", r, 123_456_789) for i, r in enumerate(rows)))
    user = spend_of(await redis_client.hgetall(keys.user_spend("carol")))
    assert user.requests == 60 and user.usd == 60 * 123_456_789 / NANOS
    assert user.tokens == sum(r.tokens for r in rows)
    assert {k: t.requests for k, t in user.by_kind.items()} == {"agent": 20, "subagent": 20, "compaction": 20}
    assert (user.failed_requests, user.aborted_requests) == (20, 20)
    s0, s1 = [spend_of(await redis_client.hgetall(keys.spend(f"s{i}"))) for i in (0, 1)]
    assert s0.requests + s1.requests == 60 and s0.usd + s1.usd == user.usd


async def test_hostile_model_names_keep_the_hash_bounded(redis_client: aioredis.Redis) -> None:
    names = [f"m\u202e{i}:requests:х" for i in range(MAX_MODELS + 5)]  # bidi control, colons, a Cyrillic х
    for name in names:
        await add_row(redis_client, "s-hostile", None, UsageRow(model=name, input_tokens=10), None)
    spend = spend_of(await redis_client.hgetall(keys.spend("s-hostile")))
    assert spend.requests == len(names) and spend.unpriced_requests == len(names) and spend.usd == 0
    assert len(spend.by_model) == MAX_MODELS + 1 and spend.by_model[OTHER].requests == 5
    assert set(names[:MAX_MODELS]) <= set(spend.by_model)
    assert not await redis_client.exists(keys.user_spend(""))  # no owner known: the user's hash is left alone
