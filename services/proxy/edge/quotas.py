"""Per-user creation rate: a fixed one-minute window counter per user (INCR + EXPIRE in one step).

Fixed windows let a burst of up to twice the limit straddle a window boundary; that is enough to stop
a runaway client (3,000 sessions in 6.6 s, docs/architecture.md "Limits on hostile input") without a per-request sorted set."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from services.proxy.edge.errors import ApiError

WINDOW_S = 60

_COUNT = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""


def rate_key(user: str, window: int) -> str:
    return f"gamma:user:{user}:creates:{window}"


async def check_create_rate(redis: aioredis.Redis, user: str, per_minute: int) -> None:
    """Count this attempt; ApiError 429 (with Retry-After) once the window's limit is passed."""
    now = time.time()
    window = int(now // WINDOW_S)
    count = int(await redis.eval(_COUNT, 1, rate_key(user, window), WINDOW_S * 2))  # type: ignore[misc]
    if count > per_minute:
        retry = max(1, int((window + 1) * WINDOW_S - now) + 1)
        raise ApiError(429, f"too many sessions created: at most {per_minute} per minute per user "
                            "(GAMMA_SESSION_CREATES_PER_MINUTE)", headers={"Retry-After": str(retry)})
