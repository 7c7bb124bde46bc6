"""The test process's httpx clients drop idle connections well before uvicorn closes them
(tests/support/keepalive.py, installed by tests/conftest.py)."""

from __future__ import annotations

import inspect

import httpx
import uvicorn


def test_httpx_clients_default_to_an_expiry_well_under_uvicorns_keep_alive() -> None:
    server_s = inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"].default
    for cls in (httpx.Client, httpx.AsyncClient):
        limits = inspect.signature(cls).parameters["limits"].default
        assert limits.keepalive_expiry is not None and limits.keepalive_expiry <= server_s / 4, (cls, limits)
        assert (limits.max_connections, limits.max_keepalive_connections) == (100, 20)  # httpx's own sizes
