"""What the routes need, built once in `create_app` and kept on `app.state` (no module singletons)."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis
from fastapi import Request
from faststream.redis import RedisBroker

from services.proxy.edge.metrics import ProxyMetrics
from services.proxy.fanout import EventFanout
from services.proxy.forwarding import Forwardable, forward
from shared.contracts.streams.inbox import InboxReply
from shared.settings import Settings
from shared.trust.oidc import BearerVerifier


@dataclass
class Proxy:
    settings: Settings
    redis: aioredis.Redis
    broker: RedisBroker
    tokens: dict[str, str]  # token -> user
    metrics: ProxyMetrics
    blocking: aioredis.Redis  # for blocking commands (shared.redis.reconnect.connect_blocking)
    fanout: EventFanout
    verifier: BearerVerifier | None  # bearer JWTs from the IdP when GAMMA_OIDC_ISSUER is set

    async def forward(self, message: Forwardable) -> InboxReply:
        """A live write to the lease holder, answered once applied (504 after the reply timeout)."""
        return await forward(self.redis, self.blocking, message, self.settings.sessions.reply_timeout_s, self.metrics)


def tracking(proxy: Proxy) -> aioredis.Redis | None:
    """The client that numbers acknowledged changes (shared/streams/causal.py), or None with the wait off."""
    return proxy.redis if proxy.settings.runtime.causal_wait_ms > 0 else None


async def get_proxy(request: Request) -> Proxy:
    """async, like every dependency of the routes: FastAPI runs a plain `def` one in its worker threads,
    a round trip through a thread (and the GIL) per request; with 200 sessions in flight, the hops of
    this one and `current_user` took 30-120 ms (p50-p90) between a request's arrival and its handler."""
    proxy: Proxy = request.app.state.proxy
    return proxy
