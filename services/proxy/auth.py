"""Bearer tokens -> user: static tokens (GAMMA_API_TOKENS) and, when GAMMA_OIDC_ISSUER is set, JWTs from
the identity provider (shared/trust/oidc.py). A missing, unknown or invalid token is 401 with an RFC 6750
challenge naming the error."""

from __future__ import annotations

import hmac

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.proxy.deps import Proxy, get_proxy
from services.proxy.edge.errors import ApiError
from shared.trust.oidc import InvalidBearer, looks_like_jwt

# auto_error=False: FastAPI's own 403 "Not authenticated" is replaced by our 401 with a JSON body.
bearer = HTTPBearer(auto_error=False, description="A token from GAMMA_API_TOKENS (`user:token,...`) or, "
                    "with GAMMA_OIDC_ISSUER set, an access token (JWT) from that identity provider.")

UNAUTHORIZED_HEADERS = {"WWW-Authenticate": "Bearer"}


def user_for_token(tokens: dict[str, str], token: str) -> str | None:
    """Constant-time comparison against every configured token (the set is small)."""
    found: str | None = None
    for known, user in tokens.items():
        if hmac.compare_digest(known.encode(), token.encode()):
            found = user
    return found


def invalid_token(description: str, error: str = "invalid_token") -> ApiError:
    challenge = InvalidBearer(description, error).challenge
    return ApiError(401, description, headers={"WWW-Authenticate": challenge})


async def current_user(  # async: a plain def dependency takes a worker thread per request (deps.py)
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer),
    proxy: Proxy = Depends(get_proxy),
) -> str:
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "missing bearer token (Authorization: Bearer <token>)", headers=UNAUTHORIZED_HEADERS)
    token = credentials.credentials
    user = user_for_token(proxy.tokens, token)
    if user is not None:
        return user
    if proxy.verifier is None or not looks_like_jwt(token):
        raise invalid_token("unknown bearer token")
    try:
        return await proxy.verifier.user(token)
    except InvalidBearer as exc:
        raise invalid_token(exc.description, exc.error) from None
