"""The tests' HTTP clients drop a connection idle for 1 s, well before the services close it.

uvicorn closes a keep-alive connection idle for 5 s (its timeout_keep_alive) and httpx keeps one for
5 s too (its keepalive_expiry): a client idle for just under 5 s by its own clock (which starts when
it has read the response, after the server's) sends its next request on a connection the server is
closing at that moment, and the request fails with "Server disconnected without sending a response"
(a loaded machine widens the window: seen once on a clean-clone run of the eval test, which
bench/eval.py fixes the same way). Set here once, in the test process (loaded by tests/conftest.py),
for every httpx client a test or a helper makes; the services' own clients are untouched.
"""

from __future__ import annotations

import httpx

KEEPALIVE_EXPIRY_S = 1.0  # a fifth of uvicorn's 5 s: a late response read never brings the two together
LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY_S)


def install() -> None:
    """httpx's own pool sizes, with the shorter expiry, as the default of httpx.Client and AsyncClient
    (a client given limits of its own keeps them)."""
    for cls in (httpx.Client, httpx.AsyncClient):
        defaults = cls.__init__.__kwdefaults__
        if defaults is None or "limits" not in defaults:
            raise RuntimeError(f"httpx.{cls.__name__}() takes no keyword `limits`: tests/support/keepalive.py")
        defaults["limits"] = LIMITS
