"""What the routes need, built once in `create_app` and kept on `app.state` (no module singletons)."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis
from fastapi import Request
from faststream.redis import RedisBroker

from shared.settings import Settings


@dataclass
class Proxy:
    settings: Settings
    redis: aioredis.Redis
    broker: RedisBroker
    tokens: dict[str, str]  # token -> user


def get_proxy(request: Request) -> Proxy:
    proxy: Proxy = request.app.state.proxy
    return proxy
