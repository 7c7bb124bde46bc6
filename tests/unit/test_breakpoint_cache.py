"""The GPT-5.6+ prompt cache as the scripted model simulates it (scripted/breakpoint_cache.py;
docs/cache.md; reference openai-api-rules.md §6): reads only at breakpoints, no rounding, writes of
the implicit breakpoint plus the 3 latest explicit ones, the latest 80 considered, a 30-minute TTL,
`cache_write_tokens` for what was written past the read; and the strict double refusing the new
fields on older models with the real API's 400."""

from __future__ import annotations

from typing import Any

from scripted.breakpoint_cache import BreakpointCache, head_tokens, positions
from scripted.strict import Strictness
from scripted.strict.requests import check

MARK = {"mode": "explicit"}
STATIC = "s" * 8000  # ~2,000 tokens at 4 characters a token
VARIANT = "v" * 6000


def block(text: str, marked: bool = True) -> dict[str, Any]:
    return {"type": "input_text", "text": text, **({"prompt_cache_breakpoint": MARK} if marked else {})}


def body(*user: str, system: list[dict[str, Any]] | None = None, mode: str = "implicit",
         model: str = "gpt-5.6-sol") -> dict[str, Any]:
    system = system if system is not None else [block(STATIC), block(VARIANT)]
    items = [{"type": "message", "role": "developer", "content": system},
             *({"type": "message", "role": "user", "content": u} for u in user)]
    return {"model": model, "input": items, "prompt_cache_options": {"mode": mode}, "stream": True, "store": False}


def test_a_new_conversation_reads_the_prefix_an_explicit_breakpoint_wrote() -> None:
    cache = BreakpointCache()
    first = cache.lookup_and_store("k", "responses", body("hello"))
    assert first.cached == 0 and first.written == positions("responses", body("hello"))[-1].tokens
    second = cache.lookup_and_store("k", "responses", body("a different question"))
    marks = [p.tokens for p in positions("responses", body("x")) if p.explicit]
    assert second.cached == marks[-1]  # exactly at the variant's breakpoint: no rounding
    assert second.written == positions("responses", body("a different question"))[-1].tokens - marks[-1]
    assert cache.lookup_and_store("other", "responses", body("hello")).cached == 0  # another prompt_cache_key


def test_without_an_explicit_breakpoint_a_new_conversation_reads_nothing() -> None:
    """A fixed prefix where only the last message changes reads 0 % (openai-api-rules.md §6, the Codex replay)."""
    cache = BreakpointCache()
    plain = [block(STATIC + VARIANT, marked=False)]
    cache.lookup_and_store("k", "responses", body("one", system=plain))
    assert cache.lookup_and_store("k", "responses", body("two", system=plain)).cached == 0
    # the same conversation growing reads its own implicit breakpoint
    assert cache.lookup_and_store("k", "responses", body("two", "three", system=plain)).cached > 3000


def test_the_static_breakpoint_serves_another_variant() -> None:
    cache = BreakpointCache()
    cache.lookup_and_store("k", "responses", body("hi"))
    other = body("hi", system=[block(STATIC), block("w" * 6000)])
    static_end = next(p.tokens for p in positions("responses", other) if p.explicit)
    assert cache.lookup_and_store("k", "responses", other).cached == static_end


def test_breakpoints_under_1024_tokens_are_not_written() -> None:
    cache = BreakpointCache()
    short = body("hi", system=[block("s" * 400)], mode="explicit")
    assert cache.lookup_and_store("k", "responses", short).written == 0
    assert cache.lookup_and_store("k", "responses", short).cached == 0


def test_a_request_writes_at_most_four_breakpoints() -> None:
    system = [block(f"{i}" * 5000) for i in range(6)]  # 6 explicit, ~1,250 tokens apart
    ends = [p.tokens for p in positions("responses", body("q", system=system)) if p.explicit]
    for mode, written in (("explicit", {2, 3, 4, 5}), ("implicit", {3, 4, 5})):
        for n, end in enumerate(ends):
            cache = BreakpointCache()
            cache.lookup_and_store("k", "responses", body("q", system=system, mode=mode))
            # a new conversation over the first n+1 blocks finds only what was written: the latest
            # 4 explicit (3 beside the implicit one)
            probe = body("other", system=system[: n + 1], mode=mode)
            assert cache.lookup_and_store("k", "responses", probe).cached == (end if n in written else 0), (mode, n)


def test_only_the_latest_80_breakpoints_are_considered() -> None:
    cache = BreakpointCache()
    cache.lookup_and_store("k", "responses", body("hi"))
    long = body(*(f"turn {i}" for i in range(100)))  # 100 items after the marked ones
    assert cache.lookup_and_store("k", "responses", long).cached == 0
    assert cache.lookup_and_store("k", "responses", body(*(f"turn {i}" for i in range(70)))).cached > 0


def test_a_prefix_lives_30_minutes_after_its_last_use() -> None:
    now = [0.0]
    cache = BreakpointCache(clock=lambda: now[0])
    cache.lookup_and_store("k", "responses", body("a"))
    now[0] = 29 * 60.0
    assert cache.lookup_and_store("k", "responses", body("b")).cached > 0  # read: its life starts again
    now[0] = 58 * 60.0
    assert cache.lookup_and_store("k", "responses", body("c")).cached > 0
    now[0] = 90 * 60.0
    assert cache.lookup_and_store("k", "responses", body("d")).cached == 0


def test_chat_bodies_mark_text_parts_and_the_head_counts_tools_and_system() -> None:
    chat = {"model": "gpt-5.6-sol", "messages": [
        {"role": "system", "content": [{"type": "text", "text": STATIC, "prompt_cache_breakpoint": MARK}]},
        {"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "t"}}]}
    marks = positions("chat", chat)
    assert [p.explicit for p in marks].count(True) == 1 and marks[-1].implicit
    assert head_tokens("chat", chat) == next(p.tokens for p in marks if p.item_end) > 2000
    cache = BreakpointCache()
    cache.lookup_and_store("k", "chat", chat)
    other = {**chat, "messages": [chat["messages"][0], {"role": "user", "content": "other"}]}
    assert cache.lookup_and_store("k", "chat", other).cached == next(p.tokens for p in marks if p.explicit)


def test_the_strict_double_refuses_the_new_fields_on_older_models() -> None:
    old = body("hi", model="gpt-5.4")
    refused = check("responses", old, Strictness())
    assert refused is not None and refused.status == 400 and "prompt_cache" in str(refused.body())
    no_options = {k: v for k, v in old.items() if k != "prompt_cache_options"}
    refused = check("responses", no_options, Strictness())
    assert refused is not None and refused.status == 400 and "prompt_cache_breakpoint" in str(refused.body())
    assert check("responses", body("hi"), Strictness()) is None  # 5.6 takes them
