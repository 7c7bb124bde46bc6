"""Bearer tokens -> user (GAMMA_API_TOKENS). A missing or unknown token is 401."""

from __future__ import annotations

import hmac

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .deps import Proxy, get_proxy
from .errors import ApiError

# auto_error=False: FastAPI's own 403 "Not authenticated" is replaced by our 401 with a JSON body.
bearer = HTTPBearer(auto_error=False, description="A token from GAMMA_API_TOKENS (`user:token,...`).")

UNAUTHORIZED_HEADERS = {"WWW-Authenticate": "Bearer"}


def user_for_token(tokens: dict[str, str], token: str) -> str | None:
    """Constant-time comparison against every configured token (the set is small)."""
    found: str | None = None
    for known, user in tokens.items():
        if hmac.compare_digest(known.encode(), token.encode()):
            found = user
    return found


async def current_user(  # async: a plain def dependency takes a worker thread per request (deps.py)
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    proxy: Proxy = Depends(get_proxy),
) -> str:
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "missing bearer token (Authorization: Bearer <token>)", headers=UNAUTHORIZED_HEADERS)
    user = user_for_token(proxy.tokens, credentials.credentials)
    if user is None:
        raise ApiError(401, "unknown bearer token", headers=UNAUTHORIZED_HEADERS)
    return user
