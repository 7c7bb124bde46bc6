"""shared/trust/oidc.py JwksCache against a loopback JWKS (tests/support/idp.py) that can hang: past max_age the
cached keys keep answering while one background fetch runs; an unknown kid waits for a fetch, shares the
one under way, and starts one at most every min_refresh_s."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx
import pytest

from shared.trust.oidc import BearerVerifier, InvalidBearer, JwksCache, OidcConfig
from tests.support.idp import AUDIENCE, Idp, SigningKey
from tests.support.polling import eventually

RSA = SigningKey.rsa("rsa-1")
EC = SigningKey.ec("ec-1")
# Far longer than any test waits: a request that waited on the hanging fetch would time the test out.
FETCH_TIMEOUT_S = 60.0


def holds(predicate: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return predicate()
    return probe


@pytest.fixture
def idp() -> Iterator[Idp]:
    server = Idp(published=[RSA]).start()
    yield server
    server.stop()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as http:
        yield http


def cache_for(idp: Idp, client: httpx.AsyncClient, max_age_s: float = 3600.0,
              min_refresh_s: float = 0.0) -> tuple[JwksCache, BearerVerifier]:
    config = OidcConfig(issuer=idp.issuer, audience=AUDIENCE, jwks_url=idp.issuer + "/jwks", max_age_s=max_age_s,
                        min_refresh_s=min_refresh_s, fetch_timeout_s=FETCH_TIMEOUT_S)
    cache = JwksCache(config, client)
    return cache, BearerVerifier(config, cache)


async def test_stale_keys_answer_while_one_background_fetch_hangs(idp: Idp, client: httpx.AsyncClient) -> None:
    cache, verifier = cache_for(idp, client, max_age_s=0.05)
    assert await verifier.user(idp.token(RSA)) == "alice@idp"
    assert idp.jwks_requests == 1
    await asyncio.sleep(0.1)  # past max_age: the set is stale
    idp.hanging = True
    # Each of these would wait FETCH_TIMEOUT_S on the lock of a blocking refresh; they answer from the cache.
    users = await asyncio.wait_for(asyncio.gather(*(verifier.user(idp.token(RSA, sub=f"u{i}")) for i in range(20))),
                                   timeout=10)
    assert users == [f"u{i}" for i in range(20)]
    await eventually(holds(lambda: idp.jwks_requests == 2), timeout=10, what="the background fetch reached the IdP")
    assert await asyncio.wait_for(verifier.user(idp.token(RSA)), timeout=10) == "alice@idp"
    assert idp.jwks_requests == 2  # single flight: one fetch for all the stale requests
    # The fetch completes: a key the IdP added since verifies without waiting for another refresh.
    idp.published = [RSA, EC]
    idp.hanging = False
    idp.release.set()
    await eventually(holds(lambda: cache._inflight is not None and cache._inflight.done()), timeout=10,
                     what="the background fetch finished")
    assert await verifier.user(idp.token(EC, sub="bob")) == "bob"
    assert idp.jwks_requests == 2
    await verifier.aclose()


async def test_an_unknown_kid_shares_the_fetch_under_way(idp: Idp, client: httpx.AsyncClient) -> None:
    cache, verifier = cache_for(idp, client)
    idp.published = [RSA, EC]
    idp.hanging = True
    waiting = [asyncio.ensure_future(verifier.user(idp.token(key))) for key in (RSA, EC, RSA)]
    await eventually(holds(lambda: idp.jwks_requests == 1), timeout=10, what="the first fetch reached the IdP")
    assert not any(task.done() for task in waiting)  # no key yet: these wait for the fetch
    idp.release.set()
    assert await asyncio.wait_for(asyncio.gather(*waiting), timeout=10) == ["alice@idp"] * 3
    assert idp.jwks_requests == 1
    await cache.aclose()


async def test_unknown_kids_fetch_at_most_once_per_interval(idp: Idp, client: httpx.AsyncClient) -> None:
    _, verifier = cache_for(idp, client, min_refresh_s=3600.0)
    assert await verifier.user(idp.token(RSA)) == "alice@idp"
    made_up = SigningKey.rsa("made-up")
    for _ in range(5):
        with pytest.raises(InvalidBearer, match="not among the issuer's keys"):
            await verifier.user(idp.token(made_up))
    assert idp.jwks_requests == 1  # the first fetch was under min_refresh_s ago: none of these refetch
    await verifier.aclose()


async def test_a_request_that_goes_away_does_not_cancel_the_shared_fetch(idp: Idp, client: httpx.AsyncClient) -> None:
    _, verifier = cache_for(idp, client, min_refresh_s=3600.0)
    idp.hanging = True
    first = asyncio.ensure_future(verifier.user(idp.token(RSA)))
    await eventually(holds(lambda: idp.jwks_requests == 1), timeout=10, what="the fetch reached the IdP")
    second = asyncio.ensure_future(verifier.user(idp.token(RSA, sub="bob")))
    first.cancel()
    idp.release.set()
    assert await asyncio.wait_for(second, timeout=10) == "bob"
    assert idp.jwks_requests == 1
    await verifier.aclose()


async def test_aclose_ends_a_hanging_fetch(idp: Idp, client: httpx.AsyncClient) -> None:
    cache, verifier = cache_for(idp, client, max_age_s=0.05)
    assert await verifier.user(idp.token(RSA)) == "alice@idp"
    await asyncio.sleep(0.1)
    idp.hanging = True
    assert await verifier.user(idp.token(RSA)) == "alice@idp"  # answered from the cache; the fetch hangs
    await eventually(holds(lambda: idp.jwks_requests == 2), timeout=10, what="the background fetch reached the IdP")
    inflight = cache._inflight
    assert inflight is not None and not inflight.done()
    await asyncio.wait_for(verifier.aclose(), timeout=10)
    assert inflight.cancelled()
