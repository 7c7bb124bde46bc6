"""The cache-break alarm (docs/cache.md "When the cache breaks"): per model request, the cached
tokens the API reported against the shared prefix the harness expected, and where the prefix
diverged when they fall short.

What is expected: within a session, the head of the previous request (tools and system prompt) and,
while the conversation is append-only, the previous request itself (prefix regime: in 128-token
steps from 1,024 tokens; breakpoint regime: its implicit breakpoint, or else the explicit ones at the
head's end); for a session's first request, the head some earlier request under the same
`prompt_cache_key` wrote (this worker's record, `PrefixLedger`). A shortfall beyond the tolerance is a
miss, explained by the first block that differs from the reference request (tools, the static
prefix, the variant body), else by the conversation (the head was read, the rest not), else by the
time since the reference (past the regime's TTL: expired) or, within it, by the provider (evicted:
a routing overflow past ~15 requests a minute per key, or a lost machine).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from services.runtime.engine.types import AgentContext

Reason = Literal["tools", "static_prefix", "variant_body", "conversation", "expired", "evicted"]
REASONS: tuple[Reason, ...] = ("tools", "static_prefix", "variant_body", "conversation", "expired", "evicted")
MIN_TOKENS, STEP_TOKENS = 1024, 128  # reference openai-api-rules.md §6 (both regimes' minimum)
# The minimum lifetime a cached prefix is counted on: `prompt_cache_options.ttl` from GPT-5.6; before,
# an `in_memory` prefix is "cleared after 5-10 min idle" (reference §6).
TTL_S = {"breakpoints": 30 * 60.0, "prefix": 5 * 60.0}
# Our token counts are the harness's (shared/history/tokens.py), the API's its own: a shortfall within this
# much is noise, not a break.
SLACK_TOKENS, SLACK_SHARE = 128, 0.1


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Head:
    """The blocks of a request's head, fingerprinted, and its tokens (tools and system prompt)."""

    tools: str
    static: str
    variant: str
    tokens: int


def head_of(context: AgentContext, tools_json: str, tokens: int) -> Head:
    system, static = context.system_prompt, context.static_prefix
    if not (static and system.startswith(static)):
        static = system
    return Head(_digest(tools_json), _digest(static), _digest(system[len(static):]), tokens)


@dataclass(frozen=True)
class Sent:
    """One request as the watch remembers it."""

    head: Head
    tokens: int  # the whole prompt
    at: float


@dataclass(frozen=True)
class Miss:
    expected: int
    cached: int
    reason: Reason

    @property
    def tokens(self) -> int:
        return self.expected - self.cached


def first_difference(now: Head, ref: Head) -> Reason | None:
    """The first block, in request order (tools render first), that differs from the reference."""
    if now.tools != ref.tools:
        return "tools"
    if now.static != ref.static:
        return "static_prefix"
    if now.variant != ref.variant:
        return "variant_body"
    return None


def expected_tokens(regime: str, head: Head, shared: int, previous: Sent | None, ledger: Sent | None) -> int:
    """The tokens the harness expects the API to read from its cache for this request."""
    if previous is not None:
        ref_head = previous.head.tokens
        if regime == "breakpoints":
            conv = previous.tokens if shared >= previous.tokens else (head.tokens if shared >= head.tokens else 0)
        else:
            conv = shared // STEP_TOKENS * STEP_TOKENS
        expected = max(ref_head, conv)
    elif ledger is not None:
        expected = ledger.head.tokens
    else:
        return 0
    if regime != "breakpoints":
        expected = expected // STEP_TOKENS * STEP_TOKENS
    return expected if expected >= MIN_TOKENS else 0


def judge(regime: str, head: Head, cached: int, expected: int, reference: Sent, now: float) -> Miss | None:
    if expected - cached <= max(SLACK_TOKENS, SLACK_SHARE * expected):
        return None
    reason = first_difference(head, reference.head)
    if reason is None:
        if cached >= head.tokens * (1 - SLACK_SHARE):
            reason = "conversation"
        elif now - reference.at >= TTL_S.get(regime, TTL_S["prefix"]):
            reason = "expired"
        else:
            reason = "evicted"
    return Miss(expected, cached, reason)


class PrefixLedger:
    """Per `model|prompt_cache_key`, the last request this worker sent under it (bounded, LRU): what a
    session's first request expects to find cached."""

    def __init__(self, max_keys: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self._sent: OrderedDict[str, Sent] = OrderedDict()
        self._max = max_keys
        self.clock = clock

    def get(self, key: str) -> Sent | None:
        return self._sent.get(key)

    def put(self, key: str, sent: Sent) -> None:
        self._sent[key] = sent
        self._sent.move_to_end(key)
        while len(self._sent) > self._max:
            self._sent.popitem(last=False)


@dataclass(frozen=True)
class MissReport:
    """A miss with what names it: the session, the request (its number in the session's stream and
    its head's sha256), the model family and variant (bounded labels)."""

    miss: Miss
    session: str
    request: int
    prefix_sha256: str
    family: str
    variant: str


@dataclass
class CacheWatch:
    """One session stream's watch: its previous request, the worker's ledger, and where misses go."""

    ledger: PrefixLedger
    report: Callable[[MissReport], None]
    session: str = ""
    variant: str = "base"
    previous: Sent | None = None
    requests: int = 0

    def check(self, key: str, regime: str, head: Head, prompt_tokens: int, shared: int, cached: int) -> Miss | None:
        """Judge one answered request, then remember it (as this stream's previous and the key's last)."""
        now = self.ledger.clock()
        self.requests += 1
        ledger = self.ledger.get(key)
        reference = self.previous or ledger
        expected = expected_tokens(regime, head, shared, self.previous, ledger)
        miss = judge(regime, head, cached, expected, reference, now) if reference is not None and expected else None
        self.previous = Sent(head, prompt_tokens, now)
        self.ledger.put(key, self.previous)
        return miss
