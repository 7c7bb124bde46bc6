"""The proxy's per-request dependencies run on the event loop, not in worker threads (docs/architecture.md "Streaming at scale":
with 200 sessions in flight, two thread hops per request took 30-120 ms before each handler ran)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import anyio.to_thread
import httpx
from fastapi import Depends, FastAPI

from services.proxy.auth import current_user
from services.proxy.deps import Proxy, get_proxy


def _app() -> FastAPI:
    app = FastAPI()
    app.state.proxy = SimpleNamespace(tokens={"tok": "alice"})

    @app.get("/whoami")
    async def whoami(user: str = Depends(current_user), proxy: Proxy = Depends(get_proxy)) -> dict[str, str]:
        return {"user": user}

    return app


async def test_a_request_is_authenticated_while_every_worker_thread_is_taken() -> None:
    limiter = anyio.to_thread.current_default_thread_limiter()
    borrowers = [object() for _ in range(int(limiter.total_tokens))]
    for borrower in borrowers:  # every worker thread busy (a burst of blocking work elsewhere)
        await limiter.acquire_on_behalf_of(borrower)
    try:
        transport = httpx.ASGITransport(app=_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            resp = await asyncio.wait_for(client.get("/whoami", headers={"Authorization": "Bearer tok"}), 2.0)
    finally:
        for borrower in borrowers:
            limiter.release_on_behalf_of(borrower)
    assert resp.status_code == 200 and resp.json() == {"user": "alice"}
