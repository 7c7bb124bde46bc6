"""A runtime worker's rate gate and circuit breaker per model provider (model/provider_gate.py), on
an injected clock."""

from __future__ import annotations

import pytest

from services.runtime.model.provider_gate import (
    Breaker,
    ProviderGates,
    RateGate,
    provider_key,
    reset_seconds,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("raw", "seconds"), [("12ms", 0.012), ("6m0s", 360.0), ("1.5s", 1.5), ("1h2m3s", 3723.0),
                                              ("20", 20.0), ("0", 0.0)])
def test_reset_durations(raw: str, seconds: float) -> None:
    assert reset_seconds(raw) == pytest.approx(seconds)


def test_reset_durations_refuse_garbage() -> None:
    assert reset_seconds("soon") is None and reset_seconds("5x") is None and reset_seconds("") is None


def test_a_429_wait_holds_every_caller_until_then() -> None:
    clock = Clock()
    gate = RateGate(clock)
    assert gate.wait_s() == 0
    gate.hold(2.0)
    clock.now += 0.5
    assert gate.wait_s() == pytest.approx(1.5)
    gate.hold(0.2)  # a shorter wait never shortens the gate
    assert gate.wait_s() == pytest.approx(1.5)
    clock.now += 2
    assert gate.wait_s() == 0


def test_ratelimit_headers_at_zero_hold_until_the_reset() -> None:
    clock = Clock()
    gate = RateGate(clock)
    gate.observe({"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "10s"})
    assert gate.wait_s() == 0
    gate.observe({"x-ratelimit-remaining-tokens": "-1", "x-ratelimit-reset-tokens": "0"})  # Azure's unknown
    assert gate.wait_s() == 0
    gate.observe({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m30s"})
    assert gate.wait_s() == pytest.approx(90.0)


def test_a_daily_quota_is_not_held_for_a_day() -> None:
    gate = RateGate(Clock(), max_wait_s=600)
    gate.hold(86_400)
    assert gate.wait_s() == 600


def test_breaker_opens_after_failures_in_a_row_and_half_opens_after_the_cooldown() -> None:
    clock = Clock()
    b = Breaker(clock, threshold=3, cooldown_s=30)
    for _ in range(2):
        b.failure()
    b.success()  # a success in between: the count starts over
    for _ in range(2):
        b.failure()
    assert b.state == "closed" and b.admit() is None
    b.failure()
    assert b.state == "open"
    assert b.admit() == pytest.approx(30.0)
    clock.now += 10
    assert b.admit() == pytest.approx(20.0)
    clock.now += 20
    assert b.state == "half_open"
    assert b.admit() is None  # one trial call
    assert b.admit() is not None  # the others still wait for its verdict
    b.failure()  # the trial failed: open again, for a whole cooldown
    assert b.state == "open" and b.admit() == pytest.approx(30.0)
    clock.now += 30
    assert b.admit() is None
    b.success()
    assert b.state == "closed" and b.admit() is None and b.failures == 0


def test_a_trial_without_verdict_lets_another_try() -> None:
    clock = Clock()
    b = Breaker(clock, threshold=1, cooldown_s=5)
    b.failure()
    clock.now += 5
    assert b.admit() is None
    b.released()  # the trial ended in a 4xx: the provider is not judged by it
    assert b.admit() is None


def test_threshold_zero_never_opens() -> None:
    b = Breaker(Clock(), threshold=0)
    for _ in range(100):
        b.failure()
    assert b.state == "closed"


def test_providers_are_keyed_by_url_and_key_identity() -> None:
    gates = ProviderGates()
    a = gates.of(provider_key("https://api.openai.com/v1/", "sk-a"))
    assert gates.of(provider_key("https://api.openai.com/v1", "sk-a")) is a
    assert gates.of(provider_key("https://api.openai.com/v1", "sk-b")) is not a
    assert "sk-a" not in provider_key("https://api.openai.com/v1", "sk-a")  # a hash, never the key
