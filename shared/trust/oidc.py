"""Bearer JWTs from an OIDC identity provider, verified against its published keys (JWKS).

Used by the proxy (user tokens) and the notifications intake (service tokens); static tokens stay beside
it for local development (docs/architecture.md "Trust boundaries", deploy/README.md "Identity provider").
Every failure is an `InvalidBearer` carrying an RFC 6750 error code and a fixed description: nothing a
token says is echoed into a response header.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import httpx
import jwt
from pydantic import BaseModel, Field

# Asymmetric only: HS* would let anyone holding the public key sign, `none` lets anyone at all.
ALLOWED_ALGORITHMS = ("RS256", "ES256")
MAX_JWKS_BYTES = 256 * 1024
MAX_KEYS = 64
MAX_TOKEN_BYTES = 16 * 1024
# Subjects land in Redis keys and logs: IdP subjects (UUIDs, `auth0|abc`, emails) fit in this.
SUBJECT = re.compile(r"[A-Za-z0-9._@|:+-]{1,200}")


class InvalidBearer(Exception):
    """`error` is RFC 6750's code (`invalid_token` or `insufficient_scope`)."""

    def __init__(self, description: str, error: str = "invalid_token") -> None:
        super().__init__(description)
        self.description = description
        self.error = error

    @property
    def challenge(self) -> str:
        return f'Bearer error="{self.error}", error_description="{self.description}"'


class OidcConfig(BaseModel):
    issuer: str
    audience: str
    jwks_url: str = ""  # empty: discovered from {issuer}/.well-known/openid-configuration
    user_claim: str = "sub"
    scope_claim: str = "scope"
    service_scope: str = "gamma.service"
    leeway_s: float = Field(30.0, ge=0, le=300)
    min_refresh_s: float = Field(30.0, ge=0)  # unknown kids refetch the JWKS at most this often
    max_age_s: float = Field(3600.0, gt=0)  # a JWKS older than this is refetched (removed keys expire)
    fetch_timeout_s: float = Field(5.0, gt=0)


class JwksCache:
    """kid -> key, fetched with async httpx (never blocking the loop), one fetch at a time.

    A set older than `max_age_s` is refetched in the background while the cached keys go on verifying
    (stale-while-revalidate): a request never waits on an IdP that is slow or down for a key it has. Only
    an unknown kid waits for a fetch, and it starts one at most every `min_refresh_s` (a flood of tokens
    with made-up kids costs the IdP one request per interval); a fetch already under way is shared.
    """

    def __init__(self, config: OidcConfig, client: httpx.AsyncClient) -> None:
        self._config = config
        self._client = client
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._jwks_url = config.jwks_url
        self._inflight: asyncio.Task[None] | None = None

    async def key(self, kid: str) -> jwt.PyJWK:
        found = self._keys.get(kid)
        if found is not None:
            if time.monotonic() - self._fetched_at > self._config.max_age_s:
                self._start_refresh()  # not awaited: the cached key answers now
            return found
        fetch = self._start_refresh()
        if fetch is not None:
            # Shielded: a request that goes away does not cancel the fetch others wait on.
            await asyncio.shield(fetch)
        found = self._keys.get(kid)
        if found is None:
            raise InvalidBearer("the token's signing key is not among the issuer's keys")
        return found

    def _start_refresh(self) -> asyncio.Task[None] | None:
        """The fetch under way, else a new one unless the last began under `min_refresh_s` ago (None)."""
        if self._inflight is not None and not self._inflight.done():
            return self._inflight
        if time.monotonic() - self._attempted_at < self._config.min_refresh_s:
            return None
        self._attempted_at = time.monotonic()
        self._inflight = asyncio.get_running_loop().create_task(self._refresh(), name="jwks-refresh")
        return self._inflight

    async def _refresh(self) -> None:
        try:
            keys = await self._fetch()
        except (httpx.HTTPError, ValueError, jwt.PyJWTError):
            return  # keys already cached keep working while the endpoint is down
        self._keys = keys
        self._fetched_at = time.monotonic()

    async def aclose(self) -> None:
        """Ends a fetch under way (at shutdown, before the HTTP client closes)."""
        task, self._inflight = self._inflight, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _fetch(self) -> dict[str, jwt.PyJWK]:
        if not self._jwks_url:
            discovery = await self._get_json(self._config.issuer.rstrip("/") + "/.well-known/openid-configuration")
            if discovery.get("issuer") != self._config.issuer:  # OpenID Connect Discovery 1.0, section 4.3
                raise ValueError("discovery document names another issuer")
            uri = discovery.get("jwks_uri")
            if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
                raise ValueError("discovery document has no jwks_uri")
            self._jwks_url = uri
        document = await self._get_json(self._jwks_url)
        return parse_jwks(document)

    async def _get_json(self, url: str) -> dict[str, Any]:
        async with self._client.stream("GET", url, timeout=self._config.fetch_timeout_s) as resp:
            resp.raise_for_status()
            body = bytearray()
            async for chunk in resp.aiter_bytes():
                body.extend(chunk)
                if len(body) > MAX_JWKS_BYTES:
                    raise ValueError("JWKS document too large")
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data


def parse_jwks(document: dict[str, Any]) -> dict[str, jwt.PyJWK]:
    """Signing keys with a kid and an allowed algorithm; anything else in the set is skipped."""
    keys: dict[str, jwt.PyJWK] = {}
    raw = document.get("keys")
    if not isinstance(raw, list):
        raise ValueError("JWKS has no keys list")
    for item in raw[:MAX_KEYS]:
        if not isinstance(item, dict) or not isinstance(item.get("kid"), str):
            continue
        if item.get("use", "sig") != "sig" or item.get("kty") not in ("RSA", "EC"):
            continue
        try:
            key = jwt.PyJWK(item)
        except jwt.PyJWTError:
            continue
        if key.algorithm_name in ALLOWED_ALGORITHMS:
            keys[item["kid"]] = key
    return keys


def _header(token: str) -> tuple[str, str]:
    if len(token) > MAX_TOKEN_BYTES:
        raise InvalidBearer("the token is too large")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise InvalidBearer("the token is not a well-formed JWT") from exc
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALLOWED_ALGORITHMS:
        raise InvalidBearer("the token's algorithm is not accepted (RS256 or ES256)")
    if not isinstance(kid, str) or not kid:
        raise InvalidBearer("the token names no signing key (kid)")
    return alg, kid


_FAILURES: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.ImmatureSignatureError, "the token is not valid yet"),
    (jwt.InvalidAudienceError, "the token is for another audience"),
    (jwt.InvalidIssuerError, "the token is from another issuer"),
    (jwt.MissingRequiredClaimError, "the token lacks a required claim"),
    (jwt.InvalidSignatureError, "the token's signature does not verify"),
)


class BearerVerifier:
    """Verifies a JWT and yields its claims; raises InvalidBearer for anything else."""

    def __init__(self, config: OidcConfig, cache: JwksCache) -> None:
        self._config = config
        self._cache = cache

    async def claims(self, token: str) -> dict[str, Any]:
        alg, kid = _header(token)
        key = await self._cache.key(kid)
        if key.algorithm_name != alg:
            raise InvalidBearer("the token's algorithm does not match its signing key")
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[alg], audience=self._config.audience, issuer=self._config.issuer,
                leeway=self._config.leeway_s,
                options={"require": ["exp", "iss", "aud", self._config.user_claim]},
            )
        except jwt.PyJWTError as exc:
            for kind, description in _FAILURES:
                if isinstance(exc, kind):
                    raise InvalidBearer(description) from exc
            raise InvalidBearer("the token is not valid") from exc
        return claims

    async def user(self, token: str) -> str:
        subject = (await self.claims(token)).get(self._config.user_claim)
        if not isinstance(subject, str) or not SUBJECT.fullmatch(subject):
            raise InvalidBearer("the token's user claim is not a usable user id")
        return subject

    async def aclose(self) -> None:
        await self._cache.aclose()

    async def require_scope(self, token: str) -> dict[str, Any]:
        """Claims of a token that carries the service scope (space-separated string or a list)."""
        claims = await self.claims(token)
        if self._config.service_scope not in scopes(claims.get(self._config.scope_claim)):
            raise InvalidBearer("the token lacks the service scope", error="insufficient_scope")
        return claims


def scopes(value: object) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str))
    return frozenset()


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


def build_verifier(config: OidcConfig | None, client: httpx.AsyncClient) -> BearerVerifier | None:
    return None if config is None else BearerVerifier(config, JwksCache(config, client))
