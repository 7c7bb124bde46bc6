"""Bearer JWTs from an identity provider, against the real proxy and notifications processes and a
loopback IdP (tests/support/idp.py): accepted keys and algorithms, every rejection a 401 with an RFC 6750
challenge, refresh on an unknown kid (rate-limited), rotation without a restart, a JWKS that is down, the
service scope for the notification intake and for connector registration."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from tests.support.idp import Idp, SigningKey
from tests.support.polling import wait_sync
from tests.support.stack import API_TOKEN, SERVICE_TOKEN, Stack

MIN_REFRESH_S = 1.0
RSA = SigningKey.rsa("rsa-1")
EC = SigningKey.ec("ec-1")


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    server = Idp(published=[RSA, EC]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oidc_stack(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory, idp: Idp) -> Iterator[Stack]:
    # No GAMMA_OIDC_JWKS_URL: the key set is found through the issuer's discovery document.
    env = {"GAMMA_OIDC_ISSUER": idp.issuer, "GAMMA_OIDC_AUDIENCE": "gamma-api",
           "GAMMA_OIDC_JWKS_MIN_REFRESH_S": str(MIN_REFRESH_S)}
    stack = Stack(redis_url=module_redis_url, data_dir=Path(tmp_path_factory.mktemp("oidc")), env_overrides=env)
    try:
        stack.start("proxy", "notifications")
        yield stack
    finally:
        stack.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create_session(stack: Stack, token: str) -> httpx.Response:
    return httpx.post(stack.url() + "/sessions", headers=bearer(token), timeout=30)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(idp: Idp, header: dict[str, str], secret: bytes | None) -> str:
    """A token PyJWT would refuse to make: `alg: none`, or HS256 keyed with the RSA public key."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(idp.claims('alice@idp')).encode())}"
    signature = b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def assert_invalid(resp: httpx.Response, description: str) -> None:
    assert resp.status_code == 401, resp.text
    challenge = resp.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="'), challenge
    assert description in challenge
    assert description in resp.json()["error"]


def test_rs256_and_es256_tokens_are_accepted(oidc_stack: Stack, idp: Idp) -> None:
    for key in (RSA, EC):
        resp = create_session(oidc_stack, idp.token(key, sub="carol@idp"))
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
        assert httpx.get(f"{oidc_stack.url()}/sessions/{sid}", headers=bearer(idp.token(key, sub="carol@idp")),
                         timeout=30).status_code == 200
    # Static tokens keep working beside the IdP.
    assert create_session(oidc_stack, API_TOKEN).status_code == 201


# Times are offsets from the moment the token is made (a value computed at collection would age while
# the suite runs up to it).
@pytest.mark.parametrize(("overrides", "description"), [
    ({"exp": -600}, "expired"),
    ({"nbf": 600}, "not valid yet"),
    ({"aud": "another-api"}, "another audience"),
    ({"iss": "https://evil.example"}, "another issuer"),
])
def test_claims_out_of_bounds_are_401(oidc_stack: Stack, idp: Idp, overrides: dict[str, object],
                                      description: str) -> None:
    now = int(time.time())
    claims = {k: now + v if k in ("exp", "nbf") and isinstance(v, int) else v for k, v in overrides.items()}
    assert_invalid(create_session(oidc_stack, idp.token(RSA, **claims)), description)


def test_alg_none_and_hs256_with_the_public_key_are_401(oidc_stack: Stack, idp: Idp) -> None:
    public_pem = RSA.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    none = unsigned(idp, {"alg": "none", "typ": "JWT", "kid": RSA.kid}, None)
    hs256 = unsigned(idp, {"alg": "HS256", "typ": "JWT", "kid": RSA.kid}, public_pem)
    for token in (none, hs256):
        assert_invalid(create_session(oidc_stack, token), "algorithm is not accepted")
    assert_invalid(create_session(oidc_stack, "a.b.c"), "not a well-formed JWT")
    assert_invalid(create_session(oidc_stack, "not-a-token"), "unknown bearer token")


def test_another_users_session_is_404(oidc_stack: Stack, idp: Idp) -> None:
    sid = create_session(oidc_stack, idp.token(RSA, sub="dave@idp")).json()["id"]
    other = httpx.get(f"{oidc_stack.url()}/sessions/{sid}", headers=bearer(idp.token(EC, sub="erin@idp")), timeout=30)
    assert other.status_code == 404


def test_unknown_kid_refreshes_rate_limited_then_401(oidc_stack: Stack, idp: Idp) -> None:
    stranger = SigningKey.rsa("unpublished")
    before = idp.jwks_requests

    def refused_after_refresh() -> bool:
        assert_invalid(create_session(oidc_stack, idp.token(stranger)), "signing key is not among")
        return idp.jwks_requests > before

    wait_sync(refused_after_refresh, what="an unknown kid to refetch the JWKS")
    before = idp.jwks_requests
    started = time.monotonic()
    for _ in range(20):
        assert_invalid(create_session(oidc_stack, idp.token(stranger)), "signing key is not among")
    elapsed = time.monotonic() - started
    # Every one asks for a refresh; at most one fetch per MIN_REFRESH_S happens.
    assert idp.jwks_requests - before <= 1 + elapsed / MIN_REFRESH_S, (idp.jwks_requests - before, elapsed)


def test_key_rotation_without_restart(oidc_stack: Stack, idp: Idp) -> None:
    rotated = SigningKey.rsa("rsa-2")
    idp.published = [rotated, EC]
    wait_sync(lambda: create_session(oidc_stack, idp.token(rotated)).status_code == 201,
              what="a token signed by the rotated-in key to be accepted")
    # The key rotated out is gone from the refreshed set.
    assert_invalid(create_session(oidc_stack, idp.token(RSA)), "signing key is not among")
    idp.published = [RSA, EC]


def test_jwks_down_keeps_cached_keys_working(oidc_stack: Stack, idp: Idp) -> None:
    assert create_session(oidc_stack, idp.token(EC)).status_code == 201  # EC's key is cached
    idp.down = True
    try:
        assert create_session(oidc_stack, idp.token(EC)).status_code == 201
        assert_invalid(create_session(oidc_stack, idp.token(SigningKey.ec("while-down"))), "signing key")
    finally:
        idp.down = False


def test_notifications_intake_needs_the_service_scope(oidc_stack: Stack, idp: Idp) -> None:
    url = oidc_stack.url("notifications") + "/notifications"
    body = {"session_id": "nosuchsession", "notification": {"id": "x", "type": "approval.resolved", "payload": {
        "approvalId": "a", "decision": "approved", "subject": "s"}}}

    def post(token: str) -> httpx.Response:
        return httpx.post(url, json=body, headers=bearer(token), timeout=30)

    # Past authentication, the unknown session answers 404.
    assert post(idp.token(EC, sub="billing", scope="openid gamma.service")).status_code == 404
    assert post(idp.token(RSA, sub="billing", scope=["gamma.service"])).status_code == 404
    assert post(SERVICE_TOKEN).status_code == 404
    lacking = post(idp.token(RSA, sub="billing", scope="openid"))
    assert lacking.status_code == 403
    assert 'error="insufficient_scope"' in lacking.headers["www-authenticate"]
    assert_invalid(post(idp.token(RSA, sub="billing", scope="gamma.service", aud="other")), "another audience")


def test_connector_registration_needs_the_service_scope(oidc_stack: Stack, idp: Idp) -> None:
    """`PUT /connectors/{name}` on the notifications service: a JWT with the service scope registers (and the
    registry answers it back), one without it is 403 insufficient_scope and stores nothing."""
    base = oidc_stack.url("notifications")
    spec = {"description": "an IdP-registered connector", "tools": [{"name": "lookup", "description": "a tool",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
                           "additionalProperties": False}}]}
    scoped = idp.token(EC, sub="connector-x", scope="openid gamma.service")
    stored = httpx.put(f"{base}/connectors/x", json=spec, headers=bearer(scoped), timeout=30)
    assert stored.status_code == 200, stored.text
    assert (stored.json()["name"], stored.json()["version"]) == ("x", 1)
    lacking = httpx.put(f"{base}/connectors/y", json=spec, headers=bearer(idp.token(RSA, sub="connector-y",
                                                                                     scope="openid")), timeout=30)
    assert lacking.status_code == 403, lacking.text
    assert lacking.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", error_description="the token lacks the service scope"')
    listed = httpx.get(f"{base}/connectors", headers=bearer(idp.token(RSA, sub="ops", scope=["gamma.service"])),
                       timeout=30)
    assert listed.status_code == 200
    assert [c["name"] for c in listed.json()["connectors"]] == ["x"]
    unknown = httpx.put(f"{base}/connectors/y", json=spec, headers=bearer("not-a-token"), timeout=30)
    assert unknown.status_code == 401 and 'error="invalid_token"' in unknown.headers["www-authenticate"]
