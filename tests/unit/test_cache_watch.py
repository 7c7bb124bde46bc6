"""The cache-break alarm's rules (services/runtime/model/cache_watch.py; docs/cache.md "When the
cache breaks"): what a request is expected to read, when a shortfall is a miss, and which block it
names. The alarm end to end (a real session, the strict double): tests/integration/test_cache_breakpoints.py."""

from __future__ import annotations

from services.runtime.engine.types import AgentContext
from services.runtime.model.cache_watch import CacheWatch, Head, PrefixLedger, Sent, expected_tokens, head_of

STATIC, VARIANT = "static prefix " * 100, "variant body " * 100


def head(tokens: int = 5000, system: str = STATIC + VARIANT, tools: str = "[tools]") -> Head:
    return head_of(AgentContext(system, [], [], static_prefix=STATIC), tools, tokens)


def watch(now: list[float]) -> CacheWatch:
    return CacheWatch(PrefixLedger(clock=lambda: now[0]), report=lambda r: None)


def test_expected_within_a_session_and_for_a_first_request() -> None:
    h = head()
    prev = Sent(h, 8000, 0.0)
    assert expected_tokens("breakpoints", h, 8000, prev, None) == 8000  # append-only: its implicit breakpoint
    assert expected_tokens("breakpoints", h, 6000, prev, None) == 5000  # history rewritten: the head's breakpoints
    assert expected_tokens("prefix", h, 7000, prev, None) == 7040 - 128  # 128-token steps
    assert expected_tokens("breakpoints", h, 0, None, Sent(h, 9000, 0.0)) == 5000  # the key's head
    assert expected_tokens("breakpoints", h, 0, None, None) == 0  # nothing written before: nothing expected
    assert expected_tokens("prefix", head(900), 0, None, Sent(head(900), 900, 0.0)) == 0  # under 1,024


def test_a_normal_session_raises_nothing() -> None:
    now = [0.0]
    w = watch(now)
    assert w.check("k", "breakpoints", head(), 5200, 0, 0) is None  # the first ever: nothing expected
    assert w.check("k", "breakpoints", head(), 6000, 5200, 5200) is None
    assert w.check("k", "breakpoints", head(), 6500, 6000, 5990) is None  # within the tolerance
    other = CacheWatch(w.ledger, report=lambda r: None)
    assert other.check("k", "breakpoints", head(), 5300, 0, 5000) is None  # a new session reads the head


def test_misses_name_the_first_differing_block() -> None:
    for changed, reason in ((head(tools="[tools+connector]"), "tools"),
                            (head(system="edited " + STATIC + VARIANT), "static_prefix"),
                            (head(system=STATIC + "edited " + VARIANT), "variant_body")):
        now = [0.0]
        w = watch(now)
        w.check("k", "breakpoints", head(), 5200, 0, 0)
        fresh = CacheWatch(w.ledger, report=lambda r: None)
        miss = fresh.check("k", "breakpoints", changed, 5200, 0, 0)
        assert miss is not None and miss.reason == reason and miss.tokens == 5000


def test_same_bytes_missed_are_the_conversation_a_ttl_or_an_eviction() -> None:
    now = [0.0]
    w = watch(now)
    w.check("k", "breakpoints", head(), 5200, 0, 0)
    assert w.check("k", "breakpoints", head(), 7000, 5200, 5100) is None
    miss = w.check("k", "breakpoints", head(), 9000, 7000, 5000)  # the head read, the conversation not
    assert miss is not None and miss.reason == "conversation"
    now[0] = 60.0
    miss = w.check("k", "breakpoints", head(), 9500, 9000, 0)
    assert miss is not None and miss.reason == "evicted"  # within the TTL: a routing overflow, a lost machine
    now[0] = 60.0 + 31 * 60
    miss = CacheWatch(w.ledger, report=lambda r: None).check("k", "breakpoints", head(), 5200, 0, 0)
    assert miss is not None and miss.reason == "expired"  # past `prompt_cache_options.ttl`
    now[0] += 6 * 60
    miss = CacheWatch(w.ledger, report=lambda r: None).check("k", "prefix", head(), 5200, 0, 0)
    assert miss is not None and miss.reason == "expired"  # 5 minutes idle before 5.6
