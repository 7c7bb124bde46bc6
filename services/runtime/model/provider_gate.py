"""One runtime worker's view of each model provider (docs/architecture.md "Model calls: retries and
recovery"): a rate gate every session's calls pass, and a circuit breaker.

- `RateGate`: when the provider says wait (a 429's wait, or `x-ratelimit-remaining-*: 0` with its
  `x-ratelimit-reset-*`, reference §4.2), every call of the worker to that provider waits until then,
  instead of each session finding out with a 429 of its own (a stampede after an org-wide limit).
- `Breaker`: opens after `threshold` provider failures in a row (5xx, connection, idle stream); while
  open, calls fail at once with a clear error; after `cooldown_s` one call goes through (half-open):
  its success closes the breaker, its failure opens it again.

Both are pure state machines over an injected clock (unit-tested without waiting). A provider is its
base URL and the identity of its key (a hash, never the key).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Clock = Callable[[], float]
# "6m0s", "12ms", "1.5s", "1h2m3s", "20" (seconds): the reset durations of reference §4.2.
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def reset_seconds(raw: str) -> float | None:
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    parts = _DURATION.findall(raw)
    if not parts or "".join(v + u for v, u in parts) != raw:
        return None
    return sum(float(v) * _UNIT[u] for v, u in parts)


def provider_key(base_url: str, api_key: str | None) -> str:
    key_id = hashlib.sha256((api_key or "").encode()).hexdigest()[:12]
    return f"{base_url.rstrip('/')}#{key_id}"


@dataclass
class RateGate:
    """Until when calls to the provider hold back (monotonic time)."""

    clock: Clock = time.monotonic
    max_wait_s: float = 600.0  # a wait the gate keeps at most (a daily quota is not a gate's business)
    until: float = 0.0

    def wait_s(self) -> float:
        return max(0.0, self.until - self.clock())

    def hold(self, seconds: float) -> None:
        """The provider asked every caller to wait `seconds` (a 429's Retry-After or its message)."""
        if seconds > 0:
            self.until = max(self.until, self.clock() + min(seconds, self.max_wait_s))

    def observe(self, headers: Mapping[str, str]) -> None:
        """`x-ratelimit-remaining-requests|tokens` at 0: hold until the matching reset (reference §4.2).
        Azure's `-1` means "unknown", not exhausted."""
        for kind in ("requests", "tokens"):
            remaining = headers.get(f"x-ratelimit-remaining-{kind}")
            reset = headers.get(f"x-ratelimit-reset-{kind}")
            if remaining is None or reset is None or remaining.strip() != "0":
                continue
            seconds = reset_seconds(reset)
            if seconds is not None:
                self.hold(seconds)


BreakerState = Literal["closed", "open", "half_open"]


@dataclass
class Breaker:
    clock: Clock = time.monotonic
    threshold: int = 5  # provider failures in a row that open it; 0: never
    cooldown_s: float = 30.0
    failures: int = 0
    opened_at: float | None = None
    probing: bool = False  # a half-open trial call is under way

    @property
    def state(self) -> BreakerState:
        if self.opened_at is None:
            return "closed"
        return "half_open" if self.clock() - self.opened_at >= self.cooldown_s else "open"

    def admit(self) -> float | None:
        """None: the call may go; else the seconds until the breaker lets a trial call through."""
        state = self.state
        if state == "closed":
            return None
        assert self.opened_at is not None
        if state == "half_open" and not self.probing:
            self.probing = True
            return None
        return max(0.0, self.opened_at + self.cooldown_s - self.clock()) or self.cooldown_s

    def success(self) -> None:
        self.failures, self.opened_at, self.probing = 0, None, False

    def failure(self) -> None:
        """A provider failure (5xx, connection, idle): not a 4xx, which is the request's fault."""
        self.failures += 1
        if self.probing or (self.threshold and self.failures >= self.threshold):
            self.opened_at, self.probing = self.clock(), False

    def released(self) -> None:
        """A trial call ended with neither verdict (a 4xx, an abort): let another one try."""
        self.probing = False


@dataclass
class Provider:
    gate: RateGate
    breaker: Breaker
    # Concurrent calls of this worker to the provider; None: unbounded.
    slots: asyncio.Semaphore | None = None


@dataclass
class ProviderGates:
    """The worker's providers: one per base URL and key (a worker's sessions share one client today;
    a per-session endpoint gets its own)."""

    breaker_threshold: int = 5
    breaker_cooldown_s: float = 30.0
    max_concurrent: int = 0  # 0: unbounded
    clock: Clock = time.monotonic
    providers: dict[str, Provider] = field(default_factory=dict)

    def of(self, key: str) -> Provider:
        found = self.providers.get(key)
        if found is None:
            found = self.providers[key] = Provider(
                RateGate(self.clock), Breaker(self.clock, self.breaker_threshold, self.breaker_cooldown_s),
                asyncio.Semaphore(self.max_concurrent) if self.max_concurrent else None)
        return found
