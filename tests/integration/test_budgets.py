"""Budgets through the five services with the scripted model (docs/costs.md "Budgets"):
- a session's own dollar cap (set at creation) stops its run before the call that would pass it, with a
  `budget_reached` event and an error entry; a new prompt then gets a 402 naming the cap, spent and
  limit, and changes nothing;
- a user's cap counts across their sessions: the second session's run stops, and its prompts get a 402;
- a per-run token cap (set at creation) ends the run, yet a new prompt is accepted (a fresh run);
- overrides above the operator's ceiling, or nonsense, are a 422 and create nothing.
The cost of one call is measured first (the scripted model's prompt and the catalogue's gpt-5-mini
price), so the caps follow the prompt when it changes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from shared.catalogue.pricing import cost_usd
from shared.redis import keys
from shared.settings import Settings
from tests.integration.runtime_support import Driver, call, done, script
from tests.support.model_runs import FAST_RETRIES
from tests.support.polling import wait_sync
from tests.support.sessions import ask, entries
from tests.support.stack import API_TOKEN, OTHER_TOKEN, Stack

pytestmark = pytest.mark.timeout(240)
CEILING_USD = 5.0


@dataclass
class Env:
    stack: Stack
    http: httpx.Client
    driver: Driver


@contextmanager
def stack_env(redis_url: str, data_dir: Path, token: str, **extra: str) -> Iterator[Env]:
    overrides = {"GAMMA_SESSION_MAX_USD_CEILING": str(CEILING_USD), **{k: str(v) for k, v in FAST_RETRIES.items()},
                 **extra}
    stack = Stack(redis_url=redis_url, data_dir=data_dir, env_overrides=overrides)
    stack.start()
    http = httpx.Client(base_url=stack.url(), headers={"Authorization": f"Bearer {token}"}, timeout=30)
    try:
        yield Env(stack, http, Driver(redis_url))
    finally:
        http.close()
        stack.stop()


@pytest.fixture(scope="module")
def env(module_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with stack_env(module_redis_url, tmp_path_factory.mktemp("budgets"), API_TOKEN) as env:
        yield env


@pytest.fixture(scope="module")
def one_call_usd(env: Env) -> float:
    """What the first model call of a session costs (a cold cache): its usage in the transcript, priced
    by the catalogue (tests/unit/test_spend_prices.py checks the prices); the totals count it."""
    sid = create(env)
    items = ask(env.http, sid, script(done("measured")))
    usage = next(e["message"]["usage"] for e in items if e["type"] == "message" and e["message"]["role"] == "assistant")
    price = Settings().models.prices.price("gpt-5-mini")
    assert price is not None
    usd = cost_usd(price, usage["input"], usage["cacheRead"], usage["output"], usage["cacheWrite"])
    spend = wait_sync(lambda: (s := spending(env, sid))["requests"] >= 1 and s, timeout=10, what="the first row")
    assert usd > 0 and spend["usd"] >= usd * 0.999 and spend["by_model"]["gpt-5-mini"]["requests"] >= 1, spend
    return usd


def create(env: Env, **body: Any) -> str:
    resp = env.http.post("/sessions", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def spending(env: Env, sid: str) -> dict[str, Any]:
    resp = env.http.get(f"/sessions/{sid}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json()["spend"])


def reached(env: Env, sid: str) -> dict[str, Any]:
    event = env.driver.wait_event(sid, lambda e: e["type"] == "budget_reached", what="budget_reached")
    wait_sync(lambda: not env.http.get(f"/sessions/{sid}").json()["running"], timeout=30, what="the run's end")
    return dict(event["data"])


def last_assistant(items: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e["message"] for e in reversed(items) if e["type"] == "message" and e["message"]["role"] == "assistant")


def post(env: Env, sid: str, text: str = "go on") -> httpx.Response:
    return env.http.post(f"/sessions/{sid}/messages", json={"message": text})


READS = script(*[{"tool_calls": [call("read", path=f"f{i}.txt")]} for i in range(8)], done("read them all"))


def test_a_session_cap_set_at_creation_stops_the_run_and_refuses_prompts(env: Env, one_call_usd: float) -> None:
    cap = round(one_call_usd * 1.3, 9)
    sid = create(env, budget={"max_usd": cap})
    assert spending(env, sid)["limits"]["session_usd"] == pytest.approx(cap)
    assert post(env, sid, READS).status_code == 202
    event = reached(env, sid)
    assert event["cap"] == "session_usd" and event["limit"] == pytest.approx(cap) and event["spent"] <= cap
    items = entries(env.http, sid)
    stop = last_assistant(items)
    assert stop["stopReason"] == "error" and stop["errorKind"] == "budget" and "session's spending cap" in stop["errorMessage"]
    reads = [e for e in items if e["type"] == "message" and e["message"]["role"] == "toolResult"]
    assert 1 <= len(reads) < 8  # stopped in the middle, everything before kept
    spend = spending(env, sid)
    assert spend["requests"] == len(reads) and spend["usd"] <= cap * 1.05  # the output of the last call at most
    # A new prompt: a 402 naming the cap, nothing queued or recorded.
    inbox = env.driver.r.xlen(keys.inbox(sid))
    refused = post(env, sid)
    assert refused.status_code == 402, refused.text
    detail = refused.json()["detail"]
    assert detail["cap"] == "session_usd" and detail["limit"] == pytest.approx(cap)
    assert detail["spent"] == pytest.approx(spend["usd"]) and "not sent" in detail["message"]
    assert env.driver.r.xlen(keys.inbox(sid)) == inbox and len(entries(env.http, sid)) == len(items)


def test_a_per_run_token_cap_ends_the_run_but_not_the_session(env: Env) -> None:
    sid = create(env, budget={"run_max_tokens": 100})
    assert spending(env, sid)["limits"]["run_tokens"] == 100
    assert post(env, sid, READS).status_code == 202
    event = reached(env, sid)
    assert event["cap"] == "run_tokens" and event["limit"] == 100 and event["spent"] > 100
    stop = last_assistant(entries(env.http, sid))
    assert stop["errorKind"] == "budget" and "token cap" in stop["errorMessage"]
    assert spending(env, sid)["requests"] == 1  # the first call went; the cap stopped the second
    assert post(env, sid, "another run").status_code == 202  # tokens per run: a new prompt is a fresh run


@pytest.mark.parametrize(("budget", "field"), [
    (f'{{"max_usd": {CEILING_USD + 1}}}', "budget.max_usd"),  # above the operator's ceiling
    ('{"run_max_tokens": 30000000}', "budget.run_max_tokens"),  # above GAMMA_RUN_MAX_TOKENS (no ceiling set)
    ('{"max_usd": -1}', None), ('{"max_usd": 0}', None), ('{"max_usd": "lots"}', None), ('{"max_usd": 1e400}', None),
    ('{"run_max_tokens": 0}', None), ('{"run_max_tokens": 1.5}', None), ('{"max_tokens": 5}', None),
])
def test_overrides_beyond_the_ceiling_or_nonsense_are_refused(env: Env, budget: str, field: str | None) -> None:
    before = [v["id"] for v in env.http.get("/sessions").json()["sessions"]]
    resp = env.http.post("/sessions", content='{"budget": ' + budget + "}", headers={"content-type": "application/json"})
    assert resp.status_code == 422, resp.text
    if field is not None:
        assert resp.json()["detail"]["field"] == field
    assert [v["id"] for v in env.http.get("/sessions").json()["sessions"]] == before  # nothing created


def test_a_user_cap_counts_across_two_sessions(one_call_usd: float, redis_url: str, tmp_path: Path) -> None:
    cap = round(one_call_usd * 1.5, 9)
    with stack_env(redis_url, tmp_path, OTHER_TOKEN, GAMMA_USER_MAX_USD=str(cap)) as capped:
        first = create(capped)
        ask(capped.http, first, script(done("one call")))
        first_spend = wait_sync(lambda: (s := spending(capped, first))["requests"] >= 1 and s, timeout=10,
                                what="the first session's row")
        second = create(capped)
        assert spending(capped, second)["user_usd"] == pytest.approx(spending(capped, first)["usd"])
        assert post(capped, second, script(done("never sent"))).status_code == 202
        event = reached(capped, second)
        assert event["cap"] == "user_usd" and event["limit"] == pytest.approx(cap)
        assert spending(capped, second)["requests"] == 0  # refused before anything was sent
        refused = post(capped, second)
        assert refused.status_code == 402 and refused.json()["detail"]["cap"] == "user_usd", refused.text
        mine = capped.http.get("/spend").json()
        assert mine["user"] == "bob" and mine["limit_usd"] == pytest.approx(cap)
        assert mine["usd"] == pytest.approx(first_spend["usd"]) and mine["requests"] == first_spend["requests"]
        assert redis.Redis.from_url(redis_url).exists(keys.user_spend("bob"))
